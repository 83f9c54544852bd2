//! Real database servers for the examples' tests (tests/real_examples.rs): PostgreSQL, MariaDB
//! (for the MySQL example) and Redis from Debian's packages (`.ci/install-tools.sh` installs
//! them), each started by the test as its own process on 127.0.0.1 or a Unix socket, with a
//! throwaway data directory and a fresh port, never the system's service. Each is stopped when
//! dropped, and killed by the kernel with the test process (`HostProcess`).
//!
//! A server is set up the way the example's official image sets itself up on its first start,
//! from the same variables (the example's Secret): the user, its password, the database. The
//! hooks then connect with a password, as they would over TCP in a cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use realcp::{HostCommand, HostProcess};

use super::wait_until;

/// A missing server binary fails the test with the fix (nothing skips).
fn installed(path: &str, package: &str) -> PathBuf {
    let path = PathBuf::from(path);
    assert!(
        path.exists(),
        "{} is missing: run `bash .ci/install-tools.sh` (it installs Debian's {package})",
        path.display()
    );
    path
}

fn is_root() -> bool {
    // `id -u`: no libc dependency for one number.
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// `cmd` as `user` when the test runs as root (servers that refuse root), keeping the parent
/// death signal (a change of user clears it).
fn as_user(user: &str, program: &Path, args: &[String]) -> (PathBuf, Vec<String>) {
    if !is_root() {
        return (program.to_path_buf(), args.to_vec());
    }
    let mut all = vec![
        format!("--reuid={user}"),
        format!("--regid={user}"),
        "--init-groups".to_string(),
        "--pdeathsig".to_string(),
        "KILL".to_string(),
        "--".to_string(),
        program.display().to_string(),
    ];
    all.extend_from_slice(args);
    (PathBuf::from("/usr/bin/setpriv"), all)
}

fn run(what: &str, program: &Path, args: &[String], env: &[(&str, &str)]) -> Output {
    let out = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stop(process: &mut HostProcess, signal: &str) {
    process.signal(signal);
    if process.wait_exit(Duration::from_secs(20)).is_none() {
        process.signal("KILL");
    }
}

/// A temporary directory every server user can enter (the server's own data directory inside it
/// is its user's, mode 0700).
fn server_dir(prefix: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// PostgreSQL 15 (Debian bookworm's), listening on a Unix socket in its directory only, with
/// password authentication (scram-sha-256) for every connection.
pub struct Postgres {
    process: HostProcess,
    /// The socket directory: `PGHOST` for a client.
    pub host: PathBuf,
    pub port: u16,
    pub user: String,
    pub password: String,
    dir: tempfile::TempDir,
}

impl Postgres {
    /// `initdb` with superuser `user` and its `password` (what the official image does with
    /// POSTGRES_USER and POSTGRES_PASSWORD), then the server, then database `database`
    /// (POSTGRES_DB). Every connection needs the password.
    pub fn start(user: &str, password: &str, database: &str) -> Postgres {
        Self::start_with(user, password, database, "scram-sha-256")
    }

    /// The same, with the official image's `pg_hba.conf`: local (socket) connections trusted,
    /// as inside its container, where a hook's psql needs no password.
    pub fn start_like_the_image(user: &str, password: &str, database: &str) -> Postgres {
        Self::start_with(user, password, database, "trust")
    }

    fn start_with(user: &str, password: &str, database: &str, local_auth: &str) -> Postgres {
        let initdb = installed(&format!("{PG_BIN}/initdb"), "postgresql-15");
        let dir = server_dir("restore-hooks-pg-");
        let data = dir.path().join("data");
        let host = dir.path().join("socket");
        let pwfile = dir.path().join("pwfile");
        std::fs::create_dir_all(&host).unwrap();
        std::fs::write(&pwfile, format!("{password}\n")).unwrap();
        if is_root() {
            run(
                "chown",
                Path::new("chown"),
                &[
                    "-R".into(),
                    "postgres:postgres".into(),
                    dir.path().display().to_string(),
                ],
                &[],
            );
        }
        let (program, args) = as_user(
            "postgres",
            &initdb,
            &[
                format!("--pgdata={}", data.display()),
                format!("--username={user}"),
                format!("--pwfile={}", pwfile.display()),
                format!("--auth-local={local_auth}"),
                "--auth-host=scram-sha-256".into(),
                "--encoding=UTF8".into(),
                "--no-sync".into(),
            ],
        );
        run("initdb", &program, &args, &[]);
        let port = realcp::free_port().unwrap();
        let (program, args) = as_user(
            "postgres",
            &PathBuf::from(format!("{PG_BIN}/postgres")),
            &[
                "-D".into(),
                data.display().to_string(),
                "-k".into(),
                host.display().to_string(),
                "-p".into(),
                port.to_string(),
                // No TCP at all: nothing of this test is reachable from elsewhere.
                "-c".into(),
                "listen_addresses=".into(),
                // The tests read `last_analyze`: only a hook may analyze.
                "-c".into(),
                "autovacuum=off".into(),
                "-c".into(),
                "fsync=off".into(),
            ],
        );
        let cmd = HostCommand::new("postgres", program, dir.path(), dir.path().join("log"))
            .args(args)
            .clear_env()
            .env("LANG", "C.UTF-8");
        let process = HostProcess::spawn(&cmd).unwrap();
        let pg = Postgres {
            process,
            host,
            port,
            user: user.into(),
            password: password.into(),
            dir,
        };
        wait_until(
            "PostgreSQL to accept connections",
            Duration::from_secs(60),
            || {
                let out = pg.psql_raw("postgres", "SELECT 1");
                if out.status.success() {
                    Ok(())
                } else {
                    Err(format!(
                        "{}; its log: {}",
                        String::from_utf8_lossy(&out.stderr),
                        pg.process.log_tail(5)
                    ))
                }
            },
        );
        pg.psql("postgres", &format!("CREATE DATABASE \"{database}\""));
        pg
    }

    /// What a client needs in its environment to reach this server (besides its password).
    pub fn client_env(&self) -> Vec<(String, String)> {
        vec![
            ("PGHOST".into(), self.host.display().to_string()),
            ("PGPORT".into(), self.port.to_string()),
        ]
    }

    fn psql_raw(&self, database: &str, sql: &str) -> Output {
        Command::new("psql")
            .args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-U", &self.user])
            .args(["-d", database, "-c", sql])
            .envs(self.client_env())
            .env("PGPASSWORD", &self.password)
            .output()
            .expect("cannot run psql")
    }

    /// `sql` in `database` as the superuser: its output (unaligned, tuples only).
    pub fn psql(&self, database: &str, sql: &str) -> String {
        let out = self.psql_raw(database, sql);
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown (SIGTERM waits for clients).
        stop(&mut self.process, "INT");
    }
}

/// MariaDB 10.11 (Debian bookworm's) on 127.0.0.1 and a fresh port, root by Unix socket only.
pub struct MariaDb {
    process: HostProcess,
    pub port: u16,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl MariaDb {
    /// What the official mysql image does on its first start with MYSQL_DATABASE, MYSQL_USER and
    /// MYSQL_PASSWORD: the database, and the user (from any host) with every right on it.
    pub fn start(database: &str, user: &str, password: &str) -> MariaDb {
        let install_db = installed("/usr/bin/mariadb-install-db", "mariadb-server");
        let dir = server_dir("restore-hooks-mariadb-");
        let data = dir.path().join("data");
        let socket = dir.path().join("mysqld.sock");
        // --no-defaults: none of the system's option files (its socket, its data directory).
        // --user=root: mariadbd refuses root unless told; as another user it ignores this.
        run(
            "mariadb-install-db",
            &install_db,
            &[
                "--no-defaults".into(),
                format!("--datadir={}", data.display()),
                "--user=root".into(),
                "--auth-root-authentication-method=socket".into(),
                "--skip-test-db".into(),
            ],
            &[],
        );
        let port = realcp::free_port().unwrap();
        let cmd = HostCommand::new(
            "mariadbd",
            installed("/usr/sbin/mariadbd", "mariadb-server"),
            dir.path(),
            dir.path().join("log"),
        )
        .args([
            "--no-defaults".to_string(),
            format!("--datadir={}", data.display()),
            format!("--socket={}", socket.display()),
            "--bind-address=127.0.0.1".into(),
            format!("--port={port}"),
            "--user=root".into(),
            "--skip-name-resolve".into(),
            "--skip-log-bin".into(),
            format!("--pid-file={}", dir.path().join("mariadbd.pid").display()),
        ]);
        let process = HostProcess::spawn(&cmd).unwrap();
        let db = MariaDb {
            process,
            port,
            socket,
            _dir: dir,
        };
        wait_until(
            "MariaDB to accept connections",
            Duration::from_secs(60),
            || {
                let out = db.root_raw("SELECT 1");
                if out.status.success() {
                    Ok(())
                } else {
                    Err(format!(
                        "{}; its log: {}",
                        String::from_utf8_lossy(&out.stderr),
                        db.process.log_tail(5)
                    ))
                }
            },
        );
        db.root(&format!(
            "CREATE DATABASE `{database}`; CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'; \
             GRANT ALL ON `{database}`.* TO '{user}'@'%'"
        ));
        db
    }

    /// What a client needs in its environment to reach this server over TCP (the mysql and
    /// mariadb clients read both; the system's option files name only a socket).
    pub fn client_env(&self) -> Vec<(String, String)> {
        vec![
            ("MYSQL_HOST".into(), "127.0.0.1".into()),
            ("MYSQL_TCP_PORT".into(), self.port.to_string()),
        ]
    }

    fn root_raw(&self, sql: &str) -> Output {
        Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket.display()))
            .args(["-uroot", "-N", "-B", "-e", sql])
            .output()
            .expect("cannot run mariadb")
    }

    /// `sql` as root: its output (batch, no column names).
    pub fn root(&self, sql: &str) -> String {
        let out = self.root_raw(sql);
        assert!(
            out.status.success(),
            "mariadb {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        stop(&mut self.process, "TERM");
    }
}

/// Redis 7.0 (Debian bookworm's) on 127.0.0.1 and a fresh port, with a password, no persistence.
pub struct Redis {
    process: HostProcess,
    pub port: u16,
    password: String,
    dir: tempfile::TempDir,
}

impl Redis {
    pub fn start(password: &str) -> Redis {
        let dir = server_dir("restore-hooks-redis-");
        let port = realcp::free_port().unwrap();
        let cmd = HostCommand::new(
            "redis-server",
            installed("/usr/bin/redis-server", "redis-server"),
            dir.path(),
            dir.path().join("log"),
        )
        .args([
            "--bind".to_string(),
            "127.0.0.1".into(),
            "--port".into(),
            port.to_string(),
            "--dir".into(),
            dir.path().display().to_string(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
            "--requirepass".into(),
            password.into(),
        ]);
        let process = HostProcess::spawn(&cmd).unwrap();
        let redis = Redis {
            process,
            port,
            password: password.into(),
            dir,
        };
        wait_until("Redis to answer", Duration::from_secs(60), || {
            let out = redis.cli_raw(&["PING"]);
            if out.status.success() && out.stdout.starts_with(b"PONG") {
                Ok(())
            } else {
                Err(format!(
                    "{}; its log: {}",
                    String::from_utf8_lossy(&out.stdout),
                    redis.process.log_tail(5)
                ))
            }
        });
        redis
    }

    /// A directory with a `redis-cli` that talks to this server: redis-cli reads no host or port
    /// from its environment, so a client finds this one first on its `PATH`, where the
    /// container's redis-cli would reach the server on localhost:6379.
    pub fn client_bin(&self) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let bin = self.dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let cli = bin.join("redis-cli");
        std::fs::write(
            &cli,
            format!(
                "#!/bin/sh\nexec /usr/bin/redis-cli -h 127.0.0.1 -p {} \"$@\"\n",
                self.port
            ),
        )
        .unwrap();
        std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    }

    fn cli_raw(&self, args: &[&str]) -> Output {
        Command::new("redis-cli")
            .args(["-e", "-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .env("REDISCLI_AUTH", &self.password)
            .output()
            .expect("cannot run redis-cli")
    }

    /// A command's reply, as redis-cli prints it (raw, one line per element).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self.cli_raw(args);
        assert!(
            out.status.success(),
            "redis-cli {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        stop(&mut self.process, "TERM");
    }
}
