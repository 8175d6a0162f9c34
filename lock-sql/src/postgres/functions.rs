//! The PL/pgSQL functions the PostgreSQL backend keeps beside its tables:
//! the one that admits a holder to a group, and the one that leaves a
//! group and admits the waiters it names. Each is replaced when its source
//! differs, so a newer lock-sql brings its own (`schema.rs`).

use lock_core::backend::AcquireRequest;

/// A function of ours: its name, what `to_regprocedure` and `GRANT
/// EXECUTE` call its arguments, and its statement.
#[derive(Debug)]
pub(super) struct Function {
    pub(super) name: String,
    pub(super) arguments: &'static str,
    parameters: &'static str,
    returns: &'static str,
    /// The PL/pgSQL source, as `pg_proc.prosrc` keeps it.
    pub(super) body: String,
}

impl Function {
    /// The admitting function `join` on the holders table `h` and the
    /// groups table `g`.
    pub(super) fn join(join: String, h: &str, g: &str) -> Self {
        Self {
            name: join,
            arguments: "(TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT)",
            parameters: "p_family TEXT, p_name TEXT, p_owner TEXT, p_kind TEXT, p_permits BIGINT, \
                         p_ttl_ms BIGINT",
            returns: "BIGINT",
            body: admission(h, g),
        }
    }

    /// The leaving function `leave`, which admits by `join`, telling
    /// listeners on `channel`.
    pub(super) fn leave(leave: String, join: &str, h: &str, g: &str, channel: &str) -> Self {
        Self {
            name: leave,
            arguments: "(TEXT, TEXT, TEXT, BIGINT, TEXT)",
            parameters: "p_family TEXT, p_name TEXT, p_owner TEXT, p_token BIGINT, p_waiters TEXT",
            returns: "TABLE (w_owner TEXT, w_token BIGINT)",
            body: leaving(join, h, g, channel),
        }
    }

    /// The statement that makes (or replaces) it.
    pub(super) fn create(&self) -> String {
        format!(
            "CREATE OR REPLACE FUNCTION {}(
    {}
) RETURNS {} LANGUAGE plpgsql VOLATILE AS $distlock${}$distlock$",
            self.name, self.parameters, self.returns, self.body
        )
    }

    /// How `to_regprocedure` and `GRANT EXECUTE` name it.
    pub(super) fn signature(&self) -> String {
        format!("{}{}", self.name, self.arguments)
    }
}

/// The source of the function that admits a holder to a group.
///
/// The function is where the counting is made safe. Under READ COMMITTED,
/// one statement reads every table from the snapshot it started with, even
/// after it waited for a row lock: a single statement that locked the
/// group's row and then counted holders could count them as they were
/// before an admission it waited for committed. In a PL/pgSQL function
/// each statement takes a fresh snapshot, so the count, made after the
/// statement that locked the group's row, sees every admission before it.
/// Deleting the expired rows first waits for a renewal in flight on them
/// and re-checks the expiry it committed. Under REPEATABLE READ or
/// SERIALIZABLE (a pool that sets them) the snapshot is the transaction's,
/// and the lock on a group's row that changed since makes the statement
/// fail with a serialization error, which is retried: never a wrong count.
fn admission(h: &str, g: &str) -> String {
    let same_group = "family = p_family AND name = p_name";
    let mark_ms = crate::client::ttl_ms(AcquireRequest::WRITER_MARK);
    format!(
        "
            DECLARE
                v_until TIMESTAMPTZ := now() + p_ttl_ms * INTERVAL '1 millisecond';
                v_token BIGINT;
                v_free BOOLEAN;
            BEGIN
                INSERT INTO {g} AS g (family, name, last_token) VALUES (p_family, p_name, 0)
                ON CONFLICT (family, name) DO UPDATE SET last_token = g.last_token;
                DELETE FROM {h} WHERE {same_group} AND expires_at <= now();
                UPDATE {h} SET expires_at = v_until
                WHERE {same_group} AND owner = p_owner AND kind <> 'wait'
                RETURNING token INTO v_token;
                IF FOUND THEN
                    RETURN v_token;
                END IF;
                IF p_kind = 'permit' THEN
                    SELECT count(*) < p_permits INTO v_free FROM {h}
                    WHERE {same_group} AND kind <> 'wait';
                ELSIF p_kind = 'read' THEN
                    SELECT NOT EXISTS (
                        SELECT 1 FROM {h} WHERE {same_group} AND kind IN ('write', 'wait')
                    ) INTO v_free;
                ELSE
                    SELECT NOT EXISTS (
                        SELECT 1 FROM {h} WHERE {same_group} AND kind <> 'wait'
                    ) INTO v_free;
                END IF;
                IF NOT v_free THEN
                    -- Nothing here needs to survive a crash (expired rows,
                    -- a waiting writer's row it writes again at its next
                    -- attempt), so the group's row is let go without
                    -- waiting for the disk.
                    PERFORM set_config('synchronous_commit', 'off', true);
                    IF p_kind = 'write' THEN
                        INSERT INTO {h} (family, name, owner, kind, token, expires_at)
                        VALUES (p_family, p_name, p_owner, 'wait', 0,
                                GREATEST(v_until, now() + {mark_ms} * INTERVAL '1 millisecond'))
                        ON CONFLICT (family, name, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at;
                    END IF;
                    RETURN NULL;
                END IF;
                UPDATE {g} SET last_token = last_token + 1 WHERE {same_group}
                RETURNING last_token INTO v_token;
                INSERT INTO {h} (family, name, owner, kind, token, expires_at)
                VALUES (p_family, p_name, p_owner, p_kind, v_token, v_until)
                ON CONFLICT (family, name, owner) DO UPDATE SET
                    kind = EXCLUDED.kind, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at;
                RETURN v_token;
            END
            "
    )
}

/// The source of the function that deletes a holder's live row (`p_owner`,
/// `p_token`) and then admits the waiters `p_waiters` names
/// (`owner:kind:ttl_ms`, comma-separated; owners are hex and kinds are
/// words, so neither holds a separator) by the admitting function, in
/// that order, in one transaction. It answers `(NULL, 0)` when the row was
/// deleted, then `(owner, token)` for each waiter admitted; nothing, and
/// nobody admitted, when the row was not there.
///
/// The group's row is locked first, as every admission locks it first, so
/// that two releases that admit cannot each wait for the other. The
/// admission is the waiter's own attempt made for it: the same rule, the
/// same snapshot discipline; but a writer that would be refused is skipped,
/// not marked waiting, since it may have given up while the release ran,
/// and a mark nobody abandons keeps readers out for its whole length. The release itself commits without waiting
/// for the disk (a release lost in a crash keeps the lock until its TTL,
/// which is safe); a grant made here waits for it as every grant does, and
/// takes the release with it, since the log is written in order.
fn leaving(join: &str, h: &str, g: &str, channel: &str) -> String {
    format!(
        "
            DECLARE
                v_commit TEXT := current_setting('synchronous_commit');
                v_waiter TEXT;
                v_w TEXT[];
                v_token BIGINT;
                v_granted BOOLEAN := false;
            BEGIN
                IF p_waiters <> '' THEN
                    PERFORM 1 FROM {g} WHERE family = p_family AND name = p_name FOR UPDATE;
                END IF;
                DELETE FROM {h} WHERE family = p_family AND name = p_name AND owner = p_owner
                    AND token = p_token AND kind <> 'wait' AND expires_at > now();
                IF NOT FOUND THEN
                    RETURN;
                END IF;
                PERFORM pg_notify('{channel}', p_family || ' ' || p_name);
                w_owner := NULL;
                w_token := 0;
                RETURN NEXT;
                FOREACH v_waiter IN ARRAY string_to_array(p_waiters, ',') LOOP
                    v_w := string_to_array(v_waiter, ':');
                    -- A writer refused is not marked from here (it may
                    -- have given up meanwhile, and a mark nobody abandons
                    -- keeps readers out): its own attempt marks it. The
                    -- expired rows go first, as the admission's first
                    -- delete would take them: that waits for a renewal in
                    -- flight, so the check below counts a row it renewed.
                    IF v_w[2] = 'write' THEN
                        DELETE FROM {h} WHERE family = p_family AND name = p_name
                            AND expires_at <= now();
                    END IF;
                    CONTINUE WHEN v_w[2] = 'write' AND EXISTS (
                        SELECT 1 FROM {h} WHERE family = p_family AND name = p_name
                            AND owner <> v_w[1] AND kind <> 'wait' AND expires_at > now());
                    v_token := {join}(p_family, p_name, v_w[1], v_w[2], 0, v_w[3]::BIGINT);
                    IF v_token IS NOT NULL THEN
                        v_granted := true;
                        w_owner := v_w[1];
                        w_token := v_token;
                        RETURN NEXT;
                    END IF;
                END LOOP;
                -- A refused admission sets it off for the transaction.
                PERFORM set_config('synchronous_commit',
                    CASE WHEN v_granted THEN v_commit ELSE 'off' END, true);
            END
            "
    )
}
