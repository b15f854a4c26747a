//! Library examples of the book that no other test runs as written: the region between
//! the `docs:` markers is the code the page shows (the docs test holds the page to it).

#[tokio::test]
async fn the_emulator_as_a_library() -> Result<(), Box<dyn std::error::Error>> {
    // docs: library-emulator
    use cachet::emulator::{spawn, EmulatorOptions};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let emu = spawn(listener, EmulatorOptions::default()).await?;
    println!("{}", emu.url()); // http://127.0.0.1:PORT
    emu.advance_clock(std::time::Duration::from_secs(301));
    for r in emu.accounted() {
        println!("{:?}", r.accounting);
    }
    emu.shutdown().await;
    // docs: end
    Ok(())
}
