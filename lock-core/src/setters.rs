//! [`setters!`](crate::setters): the builder methods of a backend's config
//! type, one line each, so that the six config types do not each spell out
//! the same `fn field(mut self, value) -> Self` bodies.

/// Builder methods that set one field each, by the field's name, keeping
/// each one's doc comment: `name: Type;` takes a `Type`, `name: into
/// Type;` any `impl Into<Type>`. For use inside the `impl` block of a
/// config type whose fields have those names; setters that do more than
/// set their field are written out beside it.
///
/// ```
/// use std::time::Duration;
///
/// #[derive(Default)]
/// pub struct ExampleConfig {
///     prefix: String,
///     timeout: Duration,
/// }
///
/// impl ExampleConfig {
///     lock_core::setters! {
///         /// Put before every key.
///         prefix: into String;
///         /// The longest one request may take.
///         timeout: Duration;
///     }
/// }
///
/// let config = ExampleConfig::default().prefix("app:").timeout(Duration::from_secs(1));
/// assert_eq!((config.prefix.as_str(), config.timeout), ("app:", Duration::from_secs(1)));
/// ```
#[macro_export]
macro_rules! setters {
    () => {};
    ($(#[$doc:meta])* $name:ident: into $ty:ty; $($rest:tt)*) => {
        $(#[$doc])*
        pub fn $name(mut self, $name: impl Into<$ty>) -> Self {
            self.$name = $name.into();
            self
        }
        $crate::setters!($($rest)*);
    };
    ($(#[$doc:meta])* $name:ident: $ty:ty; $($rest:tt)*) => {
        $(#[$doc])*
        pub fn $name(mut self, $name: $ty) -> Self {
            self.$name = $name;
            self
        }
        $crate::setters!($($rest)*);
    };
}
