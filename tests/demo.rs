//! `restore-hooks demo` runs in-process and reports success: the simulator, the webhook over
//! TLS, the controller and the sample restore all behave as designed.

use restore_hooks::cli::DemoArgs;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_succeeds() {
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        restore_hooks::demo::run(DemoArgs { verbose: false }),
    )
    .await
    .expect("the demo finishes within a minute");
    if let Err(e) = result {
        panic!("demo failed: {e:#}");
    }
}
