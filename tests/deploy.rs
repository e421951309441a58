//! Deploying tickler (#47), as far as this machine allows: the systemd
//! unit verifies and is hardened; the Kubernetes overlays render and pass
//! the Kubernetes schemas; the Dockerfile passes a static check; and an
//! image of the runtime built from this binary (buildah, no registry)
//! runs `--version`, `migrate` and a `serve` that turns ready.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use tickler_testkit::{database_create, database_drop, eventually, scratch_dir, unique};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("{command:?}: {err}"));
    assert!(
        output.status.success(),
        "{command:?}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn venv_bin(venv: &str, name: &str) -> PathBuf {
    let home = std::env::var("HOME").unwrap();
    PathBuf::from(home)
        .join(".cache/tickler")
        .join(venv)
        .join("bin")
        .join(name)
}

/// `name = value` of a unit file's line.
fn unit_value<'a>(unit: &'a str, name: &str) -> &'a str {
    unit.lines()
        .find_map(|line| line.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("the unit sets {name}"))
}

#[test]
fn the_systemd_unit_verifies_is_hardened_and_waits_out_a_drain() {
    let unit = std::fs::read_to_string(root().join("deploy/systemd/tickler.service")).unwrap();
    // verify checks that the binary exists: this build's stands in.
    let dir = scratch_dir();
    let local = dir.join("tickler.service");
    std::fs::write(
        &local,
        unit.replace("/usr/local/bin/tickler", env!("CARGO_BIN_EXE_tickler")),
    )
    .unwrap();
    let verified = run(Command::new("systemd-analyze").arg("verify").arg(&local));
    assert!(
        verified.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    let security = run(Command::new("systemd-analyze")
        .args(["security", "--offline=true"])
        .arg(&local));
    let text = String::from_utf8_lossy(&security.stdout);
    let exposure: f64 = text
        .lines()
        .find_map(|l| l.split("tickler.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("an exposure level: {text}"));
    assert!(exposure <= 2.0, "exposure {exposure}: {text}");
    for (name, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("DynamicUser", "yes"),
        ("Restart", "on-failure"),
    ] {
        assert_eq!(unit_value(&unit, name), value);
    }
    // The stop timeout covers the example's drain and shutdown_timeout_ms.
    let env = std::fs::read_to_string(root().join("deploy/systemd/tickler.env")).unwrap();
    let drain_ms: u64 = unit_value(&env, "TICKLER_API_DRAIN_MS").parse().unwrap();
    let shutdown_ms = tickler::config::Config::default().shutdown_timeout_ms;
    let stop_s: u64 = unit_value(&unit, "TimeoutStopSec").parse().unwrap();
    assert!(
        stop_s * 1000 > drain_ms + shutdown_ms,
        "TimeoutStopSec {stop_s}"
    );
}

#[test]
fn the_kubernetes_overlays_render_and_pass_the_schemas() {
    let validate = venv_bin("venv", "kubernetes-validate");
    for overlay in ["all-in-one", "split-roles"] {
        let dir = root().join("deploy/kubernetes/overlays").join(overlay);
        let rendered = run(Command::new("kubectl").arg("kustomize").arg(&dir));
        let file = scratch_dir().join(format!("{overlay}.yaml"));
        std::fs::write(&file, &rendered.stdout).unwrap();
        let checked = Command::new(&validate)
            .args(["--strict", "--quiet", "-k", "1.33.0"])
            .arg(&file)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&checked.stdout).to_string()
            + &String::from_utf8_lossy(&checked.stderr);
        assert!(checked.status.success(), "{overlay}: {said}");
        assert!(!said.contains("ERROR"), "{overlay}: {said}");
        let text = String::from_utf8_lossy(&rendered.stdout);
        let deployments = text.matches("kind: Deployment").count();
        assert_eq!(deployments, if overlay == "all-in-one" { 1 } else { 3 });
        // Each Deployment: readiness on /readyz, liveness on /healthz, the
        // Secret, and a grace period over the drain and the shutdown.
        assert_eq!(text.matches("path: /readyz").count(), deployments);
        assert_eq!(
            text.matches("secretRef:").count(),
            deployments + 1,
            "and the migration"
        );
        for grace in text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("terminationGracePeriodSeconds: "))
        {
            let grace: u64 = grace.parse().unwrap();
            assert!(
                grace * 1000 >= 2_000 + 5_000 + 90_000,
                "{overlay}: {grace} s"
            );
        }
        for kind in ["PodDisruptionBudget", "ServiceMonitor", "Job"] {
            assert!(text.contains(&format!("kind: {kind}")), "{overlay}: {kind}");
        }
    }
}

#[test]
fn the_dockerfile_passes_a_static_check() {
    let checkov = venv_bin("venv-checkov", "checkov");
    let output = Command::new(&checkov)
        .args([
            "--framework",
            "dockerfile",
            "--compact",
            "--quiet",
            "--skip-download",
            "-f",
        ])
        .arg(root().join("Dockerfile"))
        .env("BC_SKIP_MAPPING", "TRUE")
        .output()
        .unwrap_or_else(|err| panic!("{checkov:?} (scripts/services tools installs it): {err}"));
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}");
    assert!(said.contains("Failed checks: 0"), "{said}");
}

/// The binary, the libraries it links and the CA certificates, under
/// `rootfs/` of a new build context.
fn context_make(dir: &Path) {
    let rootfs = dir.join("rootfs");
    let binary = env!("CARGO_BIN_EXE_tickler");
    std::fs::create_dir_all(rootfs.join("usr/local/bin")).unwrap();
    std::fs::create_dir_all(rootfs.join("etc/ssl/certs")).unwrap();
    std::fs::create_dir_all(rootfs.join("tmp")).unwrap();
    std::fs::copy(binary, rootfs.join("usr/local/bin/tickler")).unwrap();
    let ldd = run(Command::new("ldd").arg(binary));
    for lib in String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|word| word.starts_with('/'))
    {
        let target = rootfs.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(lib, &target).unwrap();
    }
    std::fs::copy(
        "/etc/ssl/certs/ca-certificates.crt",
        rootfs.join("etc/ssl/certs/ca-certificates.crt"),
    )
    .unwrap();
    std::fs::copy(
        root().join("deploy/docker/Containerfile.local"),
        dir.join("Containerfile"),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_of_this_binary_runs_migrate_and_serves_ready() {
    let dir = scratch_dir();
    context_make(&dir);
    // A storage of this test's own: parallel runs share nothing.
    let buildah = |args: &[&str]| {
        let mut command = Command::new("buildah");
        command
            .arg("--root")
            .arg(dir.join("storage"))
            .arg("--runroot")
            .arg(dir.join("run"))
            .args(["--storage-driver", "vfs"])
            .args(args);
        command
    };
    let image = unique("tickler-test-");
    run(buildah(&["bud", "--quiet", "-t", &image, "-f"])
        .arg(dir.join("Containerfile"))
        .arg(&dir));
    let container = run(&mut buildah(&["from", &image]));
    let container = String::from_utf8_lossy(&container.stdout).trim().to_owned();
    let in_it = |env: &[(&str, String)], args: &[&str]| {
        let mut command = buildah(&["run", "--isolation", "chroot"]);
        for (name, value) in env {
            command.arg("--env").arg(format!("{name}={value}"));
        }
        command
            .arg(&container)
            .arg("--")
            .arg("/usr/local/bin/tickler")
            .args(args);
        command
    };
    let version = run(&mut in_it(&[], &["--version"]));
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("tickler "));

    let (db_name, url) = database_create().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env = [
        ("TICKLER_MYSQL_URL", url.clone()),
        ("TICKLER_REDIS_PREFIX", unique("tickler-t-")),
        ("TICKLER_API_ADDR", format!("127.0.0.1:{port}")),
        ("TICKLER_LOG", "warn".to_owned()),
    ];
    run(&mut in_it(&env, &["migrate"]));
    let mut serving = in_it(&env, &["serve"]);
    let mut child = serving
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let ready = eventually(Duration::from_secs(30), || async {
        let answer = reqwest::get(format!("http://127.0.0.1:{port}/readyz"))
            .await
            .ok()?;
        (answer.status() == 200).then_some(())
    })
    .await;
    // The whole group: buildah and the tickler it runs.
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{}", child.id())])
        .status();
    let exited = eventually(Duration::from_secs(30), || {
        let status = child.try_wait().unwrap();
        async move { status }
    })
    .await;
    assert!(ready.is_some(), "the image's tickler turns ready");
    assert!(exited.is_some(), "it stops on SIGTERM");
    let _ = buildah(&["rm", &container]).output();
    let _ = std::fs::remove_dir_all(dir.join("storage"));
    database_drop(&db_name).await;
}
