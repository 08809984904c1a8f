//! The live view of a campaign: started by `deja explore --serve`, or serving a saved campaign
//! with `deja serve`.

use super::*;

/// Starts the live view of the campaign `cfg` describes and prints its address; with
/// `--serve-wait`, returns once a page is open.
pub(super) fn serve_live(
    addr: std::net::SocketAddr,
    args: &ExploreArgs,
    cfg: &CampaignConfig,
) -> Result<(crate::serve::Live, crate::serve::Feed), String> {
    let header = deja_explore::Campaign {
        program: args.image.as_ref().or(args.program.as_ref()).map(|p| p.display().to_string()).unwrap_or_default(),
        program_blake3: String::new(),
        strategy: cfg.strategy.name().into(),
        mode: cfg.mode.name().into(),
        seed: cfg.seed,
        rounds: 0,
        wall_seconds: 0.0,
        corpus_size: 0,
        edges_total: 0,
        edges_hit: 0,
        timeline: Vec::new(),
        wall_timeline: Vec::new(),
        faults: BTreeMap::new(),
        bugs: Vec::new(),
        assertions: Vec::new(),
        baseline: None,
        host: None,
        unconfirmed: Vec::new(),
        fail_stops: Vec::new(),
        jobs: cfg.jobs,
        shard: cfg.shard.map(|(i, n)| format!("{i}/{n}")),
        shards: Vec::new(),
        no_progress_rounds: 0,
        no_progress: Vec::new(),
        blocks: None,
        frontier: None,
        fork_checks: None,
    };
    let (live, feed) = crate::serve::Live::start(addr, &cfg.out, &header)?;
    announce(&live.server().url, addr);
    if args.serve_wait {
        eprintln!("deja: waiting for the page to open before the campaign starts");
        live.server().wait_for_viewer();
    }
    Ok((live, feed))
}

/// Prints where the live view is, and a warning when it is not on loopback.
fn announce(url: &str, addr: std::net::SocketAddr) {
    eprintln!("deja: live view at {url}");
    if !addr.ip().is_loopback() {
        eprintln!(
            "deja: note: {} is not a loopback address: anyone who can reach it can see the campaign and read its files",
            addr.ip()
        );
    }
}

/// Arguments of `deja serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Where to listen: PORT or HOST:PORT (default 127.0.0.1 and a free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0", value_parser = crate::serve::parse_addr)]
    pub addr: std::net::SocketAddr,
    /// The campaign's directory (`deja explore --out`).
    pub dir: PathBuf,
}

/// `deja serve`: serves the campaign saved in a directory until killed; [`Exit::Incomplete`] when
/// it holds none, [`Exit::Usage`] when nothing can listen on the address.
pub fn serve(args: ServeArgs) -> Exit {
    let (campaign, finished) = match deja_explore::saved(&args.dir) {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    let book = crate::serve::Book::saved(&campaign, finished);
    let server = match crate::serve::Server::start(args.addr, &args.dir, book) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("deja: error: {e}");
            return Exit::Usage;
        }
    };
    eprintln!(
        "deja: {} campaign in {}: {} rounds, {} bug(s)",
        if finished { "the finished" } else { "the checkpointed" },
        args.dir.display(),
        campaign.rounds,
        campaign.bugs.len()
    );
    announce(&server.url, args.addr);
    server.forever()
}
