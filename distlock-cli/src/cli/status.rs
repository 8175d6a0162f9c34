//! `distlock status`: who holds a lock.

use distlock::Result;

use super::args::StatusArgs;
use super::exit;

pub(crate) async fn status(args: StatusArgs) -> Result<u8> {
    let locker = distlock::connect(&args.backend.url).await?;
    let name = distlock::LockName::new(&args.backend.name)?;
    match locker.holder(&name).await? {
        None => {
            println!("lock \"{name}\" is free");
            Ok(0)
        }
        Some(h) => {
            let expiry = h
                .expires_in
                .map(|d| format!(", expires in {:.1}s unless renewed", d.as_secs_f64()))
                .unwrap_or_default();
            let token = h
                .token
                .map(|t| format!(" with fencing token {t}"))
                .unwrap_or_default();
            println!(
                "lock \"{name}\" is held by owner {}…{token}{expiry}",
                h.owner
            );
            Ok(exit::BUSY)
        }
    }
}
