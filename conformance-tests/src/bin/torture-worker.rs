//! One worker process of the fault suite (see `distlock_torture::worker`).
//!
//! Usage: `torture-worker url=URL name=NAME lock=mutex|semaphore/N|read-write
//! probe=false|true ttl-ms=… hold-ms=… wait-ms=… start=PATH history=PATH
//! register=PATH`

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let plan = distlock_torture::WorkerPlan::from_args(&args)?;
    let locker = distlock::connect(&plan.url).await?;
    distlock_torture::work(&locker, &plan).await?;
    Ok(())
}
