//! The worked examples (`examples/*.yaml`) on a real kube-apiserver (e2e/realcp), their hooks
//! exec'd through it against real database servers, their effect read back from the database.
//!
//! Each example is applied as written into a namespace labelled as a restore's (docs/hooks.md
//! "Which pods are restored pods"), with two changes that only stand in for what this machine
//! lacks: a StatefulSet's volumeClaimTemplates become emptyDir volumes (no storage provisioner),
//! and a connection string in a Secret names the test's server instead of the in-cluster
//! Service. The hook commands, the hook objects and the containers' env are never changed.
//!
//! How a hook reaches the server: kwok runs `pods/exec` as a process on this host
//! (e2e/realcp/README.md "Exec runs on the host"). kwok gives that process its own environment
//! plus the `envs` of the pod's kwok `Exec` rule, never the container's `env`/`envFrom` (read in
//! kwok v0.8.0, pkg/kwok/server/debugging_exec.go). So the test does the kubelet's part: it
//! resolves the container's environment from the example's Secret and puts it in the pod's Exec
//! rule, with the client's own variables pointing at the test's server (`PGHOST`/`PGPORT`,
//! `MYSQL_HOST`/`MYSQL_TCP_PORT`; a `redis-cli` on `PATH` for Redis, whose client reads none),
//! where in the container the client would reach its server on the default socket or port.
//!
//! Every assertion is on the database (a column added, a row written, statistics taken, a key
//! renamed), not on exit codes alone: a hook that "succeeds" without its effect fails the test.
//! MongoDB cannot be installed here (examples/mongodb.yaml says why): tests/inject_cli.rs checks
//! that example.

mod real;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use real::databases::{MariaDb, Postgres, Redis};
use real::*;
use serde_json::{Value, json};

/// The documents of `examples/<name>.yaml`.
fn example(name: &str) -> Vec<Value> {
    let path = root().join("examples").join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    text.split("\n---")
        .map(|doc| yaml_serde::from_str::<Value>(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

fn kind_of<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the example has no {kind} {name}"))
}

/// A Secret's keys and values (the examples write `stringData`).
fn secret_data(secret: &Value) -> BTreeMap<String, String> {
    secret["stringData"]
        .as_object()
        .expect("the examples' Secrets use stringData")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

/// The environment the kubelet gives `container`: its `envFrom` Secrets, then its `env` (values
/// and Secret keys), resolved from `secrets`.
fn container_env(container: &Value, secrets: &[&Value]) -> Vec<(String, String)> {
    let secret = |name: &Value| -> BTreeMap<String, String> {
        secret_data(
            secrets
                .iter()
                .find(|s| s["metadata"]["name"] == *name)
                .unwrap_or_else(|| panic!("no Secret {name} in the example")),
        )
    };
    let mut env = Vec::new();
    for from in container["envFrom"].as_array().into_iter().flatten() {
        env.extend(secret(&from["secretRef"]["name"]));
    }
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap().to_string();
        let value = match e["value"].as_str() {
            Some(v) => v.to_string(),
            None => {
                let key = &e["valueFrom"]["secretKeyRef"];
                secret(&key["name"])[key["key"].as_str().unwrap()].clone()
            }
        };
        env.push((name, value));
    }
    env
}

/// The workload as this machine can run it: its volumeClaimTemplates as emptyDir volumes (no
/// storage provisioner here), pods gone at once when deleted.
fn runnable_here(workload: &Value) -> Value {
    let mut w = workload.clone();
    let spec = &mut w["spec"]["template"]["spec"];
    spec["terminationGracePeriodSeconds"] = json!(0);
    spec["automountServiceAccountToken"] = json!(false);
    if let Some(claims) = workload["spec"]["volumeClaimTemplates"].as_array() {
        let volumes: Vec<Value> = claims
            .iter()
            .map(|c| json!({"name": c["metadata"]["name"], "emptyDir": {}}))
            .collect();
        spec["volumes"] = json!(volumes);
        w["spec"]
            .as_object_mut()
            .unwrap()
            .remove("volumeClaimTemplates");
    }
    w
}

fn in_namespace(doc: &Value, ns: &str) -> Value {
    let mut d = doc.clone();
    d["metadata"]["namespace"] = json!(ns);
    d
}

/// Gives pod `ns/pod` a kwok Exec rule: its exec'd commands run in their own directory with
/// `env` added to kwok's environment (what the kubelet would give the container). `HOME` is that
/// directory, so no client reads the host's dotfiles.
fn exec_rule(cp: &ControlPlane, ns: &str, pod: &str, env: &[(String, String)]) -> PathBuf {
    namespace(cp, ns, json!({}));
    let dir = cp.work_dir().join("pods").join(ns).join(pod);
    std::fs::create_dir_all(&dir).unwrap();
    let mut envs: Vec<Value> = env
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    envs.push(json!({"name": "HOME", "value": dir}));
    cp.apply(
        &json!({
            "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Exec",
            "metadata": {"name": pod, "namespace": ns},
            "spec": {"execs": [{"local": {"workDir": dir, "envs": envs}}]},
        })
        .to_string(),
    )
    .unwrap();
    dir
}

/// Waits until kwok applies the Exec rules created so far: kwok learns of them through one
/// watch, in order, so once it applies a rule created after them (a probe pod's, in a namespace
/// of its own outside any restore), it applies them too.
fn wait_for_exec_rules(cp: &ControlPlane, tag: &str) {
    let ns = format!("probe-{tag}");
    exec_rule(cp, &ns, "probe", &[("RH_PROBE".into(), tag.into())]);
    create(cp, &pod(&ns, "probe", &["probe"], json!({}), json!({})));
    wait_running(cp, &ns, "probe");
    wait_until(
        format!("kwok to apply the Exec rules ({tag})"),
        Duration::from_secs(60),
        || {
            let out = cp.kubectl([
                "exec",
                "-n",
                &ns,
                "probe",
                "--",
                "sh",
                "-c",
                "echo \"$RH_PROBE\"",
            ]);
            let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (got == tag).then_some(()).ok_or(got)
        },
    );
}

/// Creates namespace `ns` labelled for restore `restore`, then the example's objects there:
/// Secrets and Services, the hook objects (once every webhook compiled them), the workloads.
/// `secret_edit` may change a Secret first (a connection string naming the test's server).
fn apply_example(
    cp: &ControlPlane,
    ns: &str,
    restore: &str,
    docs: &[Value],
    secret_edit: &dyn Fn(&mut Value),
) {
    namespace(cp, ns, json!({NAMESPACE_LABEL: restore}));
    let mut plain = Vec::new();
    for d in docs {
        if matches!(d["kind"].as_str(), Some("Secret" | "Service")) {
            let mut d = in_namespace(d, ns);
            if d["kind"] == "Secret" {
                secret_edit(&mut d);
            }
            plain.push(d);
        }
    }
    apply_list(cp, &plain);
    let hooks: Vec<Value> = kind_of(docs, "RestoreHook")
        .into_iter()
        .map(|h| in_namespace(h, ns))
        .collect();
    scenarios::apply_hooks(cp, &hooks);
    let workloads: Vec<Value> = docs
        .iter()
        .filter(|d| matches!(d["kind"].as_str(), Some("StatefulSet" | "Deployment")))
        .map(|w| in_namespace(&runnable_here(w), ns))
        .collect();
    apply_list(cp, &workloads);
}

/// The pods of app=`app` in `ns` once each has ended its hooks, by name.
fn ended_pods(cp: &ControlPlane, ns: &str, app: &str, n: usize) -> Vec<Value> {
    wait_until(
        format!("{n} pods of {ns}/{app} with their hooks ended"),
        Duration::from_secs(180),
        || {
            let list = get_json(cp, &["get", "pods", "-n", ns, "-l", &format!("app={app}")])
                .ok_or("no list")?;
            let mut pods: Vec<Value> = list["items"].as_array().cloned().unwrap_or_default();
            pods.sort_by_key(|p| p["metadata"]["name"].as_str().unwrap().to_string());
            let ended = pods
                .iter()
                .filter(|p| {
                    matches!(
                        p["metadata"]["labels"][EXEC_LABEL].as_str(),
                        Some("done" | "failed")
                    )
                })
                .count();
            if pods.len() == n && ended == n {
                Ok(pods)
            } else {
                let statuses: Vec<String> = pods
                    .iter()
                    .map(|p| format!("{}", p["metadata"]["annotations"][STATUS]))
                    .collect();
                Err(format!("{} pods, {ended} ended: {statuses:?}", pods.len()))
            }
        },
    )
}

/// `(hook name, phase)` of each entry of the pod's status, in plan order; the whole status in
/// messages.
fn phases(pod: &Value) -> Vec<(String, String)> {
    let status = hook_status(pod).unwrap_or_else(|| panic!("no status on {}", pod["metadata"]));
    status["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap().to_string(),
                h["phase"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// The pod's status annotation, for assertion messages.
fn status_text(pod: &Value) -> String {
    pod["metadata"]["annotations"][STATUS]
        .as_str()
        .unwrap_or("no status")
        .to_string()
}

/// What a container runtime would do with ephemeral container `name` of `pod`, which kwok
/// reports ended without running anything (e2e/realcp: EPHEMERAL_STAGE): its command, as the API
/// server stored it, with no environment but a PATH (an ephemeral container gets none of the
/// pod's), as the pod's user, with each Secret volume it mounts at its mountPath, its files as the
/// API server has the Secret (what the kubelet would mount). The mounts are
/// made in a mount namespace of its own, on a private tmpfs over /run (the example mounts under
/// /run/secrets), so nothing on the host changes.
fn run_ephemeral_container(cp: &ControlPlane, pod: &Value, name: &str, dir: &Path) -> Output {
    use base64::Engine;
    let ns = pod["metadata"]["namespace"].as_str().unwrap();
    let container = pod["spec"]["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no ephemeral container {name} in {}", pod["spec"]));
    let mut script = String::from("set -e; mount -t tmpfs tmpfs /run; ");
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let path = mount["mountPath"].as_str().unwrap();
        assert!(
            path.starts_with("/run/"),
            "mounts outside /run would need more than a tmpfs over /run: {path}"
        );
        let volume = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        let secret_name = volume["secret"]["secretName"]
            .as_str()
            .expect("the hook mounts a Secret volume");
        let secret = get_json(cp, &["get", "secret", secret_name, "-n", ns]).unwrap();
        let files = dir.join(mount["name"].as_str().unwrap());
        std::fs::create_dir_all(&files).unwrap();
        for (key, value) in secret["data"].as_object().unwrap() {
            let value = base64::engine::general_purpose::STANDARD
                .decode(value.as_str().unwrap())
                .unwrap();
            std::fs::write(files.join(key), value).unwrap();
        }
        script.push_str(&format!(
            "mkdir -p '{path}'; mount --bind '{}' '{path}'; ",
            files.display()
        ));
    }
    let user = pod["spec"]["securityContext"]["runAsUser"]
        .as_i64()
        .unwrap_or(0);
    script.push_str(&format!(
        "exec setpriv --reuid={user} --regid={user} --clear-groups -- \"$@\""
    ));
    let command: Vec<&str> = container["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(&script)
        .arg("runtime")
        .args(&command)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("LANG", "C.UTF-8")
        .current_dir("/")
        .output()
        .expect("cannot run unshare")
}

/// The pod annotations of docs/hooks.md's Velero annotation example (the ```yaml block that sets
/// `post.hook.restore.velero.io/command`).
fn docs_annotation_example() -> Value {
    let text = std::fs::read_to_string(root().join("docs/hooks.md")).unwrap();
    let block = text
        .split("```yaml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.contains("post.hook.restore.velero.io/command:"))
        .expect("docs/hooks.md has an annotation example");
    let doc: Value = yaml_serde::from_str(block).unwrap();
    doc["metadata"]["annotations"].clone()
}

/// Waits (bounded) until table `orders` of `database` was analyzed by a client, not autovacuum
/// (off in the test's servers). The statistics views may lag the command by a moment.
fn analyzed(pg: &Postgres, database: &str) {
    let sql = "SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'orders'";
    wait_until(
        format!("ANALYZE of {database}.orders"),
        Duration::from_secs(30),
        || {
            let got = pg.psql(database, sql);
            (got == "t").then_some(()).ok_or(got)
        },
    );
}

/// examples/postgres.yaml with examples/app-image-hook.yaml, then examples/restored-pod.yaml
/// with examples/hooks.yaml, each against a real PostgreSQL:
///
/// 1. A restore of a database with data: `postgres-check` analyzes it (`last_analyze` set, and
///    no autovacuum in the test server could have), `postgres-migrate` adds the column and
///    records the migration with the restore's name, once; the distroless app's `api-migrate`
///    waits for it, runs once among the app's two pods, in an ephemeral container whose command
///    creates the index and records it.
/// 2. A restore whose database came back empty: `postgres-check` fails (onError: Fail), the
///    migration is skipped, the database is unchanged.
/// 3. The Velero-restored pod of restored-pod.yaml: hooks.yaml's hooks wait for the server,
///    analyze it and create pg_prewarm, as the image's user, in POSTGRES_DB.
/// 4. The annotation example of docs/hooks.md (the REINDEX the docs show in four places), on a
///    server that trusts local connections as the image does: the index is rebuilt (a new
///    relfilenode) in database `app`.
#[test]
fn postgres_examples_check_and_migrate_a_real_database() {
    let docs = example("postgres");
    let app = example("app-image-hook");
    let secret = secret_data(named(&docs, "Secret", "postgres-credentials"));
    let (user, password, database) = (
        &secret["POSTGRES_USER"],
        &secret["POSTGRES_PASSWORD"],
        &secret["POSTGRES_DB"],
    );
    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;

    // The restored database: the backup had a table of orders.
    let pg = Postgres::start(user, password, database);
    pg.psql(
        database,
        "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL); \
         INSERT INTO orders SELECT g, 'customer-' || (g % 7) FROM generate_series(1, 500) g",
    );
    // ... and the one whose backup came back empty.
    let empty = Postgres::start(user, password, database);

    let container =
        &named(&docs, "StatefulSet", "postgres")["spec"]["template"]["spec"]["containers"][0];
    let secrets: Vec<&Value> = kind_of(&docs, "Secret")
        .into_iter()
        .chain(kind_of(&app, "Secret"))
        .collect();
    for (ns, server) in [("pg", &pg), ("pg-empty", &empty)] {
        let mut env = container_env(container, &secrets);
        env.extend(server.client_env());
        exec_rule(cp, ns, "postgres-0", &env);
    }
    // The pod of restored-pod.yaml: its own server, its container `db`'s environment.
    let restored_pod: Value = yaml_serde::from_str(
        &std::fs::read_to_string(root().join("examples/restored-pod.yaml")).unwrap(),
    )
    .unwrap();
    let velero_pg = Postgres::start(user, password, database);
    velero_pg.psql(
        database,
        "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL); \
         INSERT INTO orders SELECT g, 'customer-' || g FROM generate_series(1, 50) g",
    );
    let mut env = container_env(&restored_pod["spec"]["containers"][0], &secrets);
    env.extend(velero_pg.client_env());
    exec_rule(cp, "shop", "postgres-0", &env);
    // docs/hooks.md's annotation example, on its own pod and server.
    let docs_pg = Postgres::start_like_the_image(user, password, "app");
    docs_pg.psql(
        "app",
        "CREATE TABLE orders (id int PRIMARY KEY); INSERT INTO orders VALUES (1), (2)",
    );
    let mut env = container_env(container, &secrets);
    env.extend(docs_pg.client_env());
    exec_rule(cp, "docs", "db-0", &env);
    wait_for_exec_rules(cp, "postgres");

    // 1. A restore with data, and the app next to it.
    let app_url = secret_data(named(&app, "Secret", "api-database"))["DATABASE_URL"].clone();
    assert!(app_url.contains("@postgres:5432/"), "{app_url}");
    let local_url = format!(
        "{}?host={}&port={}",
        app_url.replace("@postgres:5432/", "@/"),
        pg.host.display(),
        pg.port
    );
    let to_test_server = |s: &mut Value| {
        if s["metadata"]["name"] == "api-database" {
            s["stringData"]["DATABASE_URL"] = json!(local_url);
        }
    };
    let both: Vec<Value> = docs.iter().chain(&app).cloned().collect();
    apply_example(cp, "pg", "r-pg", &both, &to_test_server);
    let db = &ended_pods(cp, "pg", "postgres", 1)[0];
    assert_eq!(
        phases(db),
        pairs(&[
            ("postgres-check", "Succeeded"),
            ("postgres-migrate", "Succeeded")
        ]),
        "{}",
        status_text(db)
    );
    assert_eq!(db["metadata"]["labels"][EXEC_LABEL], "done");
    // postgres-check: the restored table's statistics were taken by ANALYZE.
    analyzed(&pg, database);
    // postgres-migrate: the column, and its record naming the restore, once.
    assert_eq!(
        pg.psql(
            database,
            "SELECT count(*), min(status) FROM orders WHERE status = 'open'"
        ),
        "500|open"
    );
    assert_eq!(
        pg.psql(
            database,
            "SELECT version, restore FROM schema_migrations ORDER BY version"
        ),
        "2026-12-orders-status|r-pg"
    );

    // api-migrate: once among the app's pods, in an ephemeral container, after postgres-migrate.
    let api = ended_pods(cp, "pg", "api", 2);
    let mut ran: Vec<&Value> = Vec::new();
    for p in &api {
        let phase = phases(p);
        assert_eq!(phase.len(), 1, "{}", status_text(p));
        match phase[0].1.as_str() {
            "Succeeded" => ran.push(p),
            "OtherPod" => {}
            other => panic!("api-migrate {other}: {}", status_text(p)),
        }
    }
    assert_eq!(ran.len(), 1, "api-migrate runs in one pod");
    let ran = ran[0];
    let containers = ran["spec"]["ephemeralContainers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "{containers:?}");
    assert_eq!(containers[0]["image"], "postgres:17");
    assert_eq!(containers[0]["targetContainerName"], "api");
    let index = "SELECT count(*) FROM pg_indexes WHERE indexname = 'orders_customer_idx'";
    assert_eq!(pg.psql(database, index), "0", "nothing ran it yet");
    let dir = tempfile::tempdir().unwrap();
    let out = run_ephemeral_container(cp, ran, containers[0]["name"].as_str().unwrap(), dir.path());
    assert!(
        out.status.success(),
        "the ephemeral container's command: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(pg.psql(database, index), "1");
    assert_eq!(
        pg.psql(
            database,
            "SELECT version, restore FROM schema_migrations ORDER BY version"
        ),
        "2026-12-api-orders-customer-idx|r-pg\n2026-12-orders-status|r-pg"
    );
    wait_restore_run(cp, "r-pg", &["Completed"], Duration::from_secs(60));

    // 2. The database came back empty: the check fails, the migration never runs.
    apply_example(cp, "pg-empty", "r-pg-empty", &docs, &|_| {});
    let db = &ended_pods(cp, "pg-empty", "postgres", 1)[0];
    assert_eq!(
        phases(db),
        pairs(&[
            ("postgres-check", "Failed"),
            ("postgres-migrate", "Skipped")
        ]),
        "{}",
        status_text(db)
    );
    let status = hook_status(db).unwrap();
    assert!(
        status["hooks"][0]["stderr"]
            .as_str()
            .unwrap()
            .contains("has no tables"),
        "{status}"
    );
    assert_eq!(
        empty.psql(
            database,
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ),
        "0",
        "the skipped migration created nothing"
    );

    // 3. restored-pod.yaml and hooks.yaml: Velero's restore label (the default `defer`: the
    // RestoreHooks run, Velero runs its own annotation hooks).
    namespace(cp, "shop", json!({}));
    apply_list(
        cp,
        &[in_namespace(
            named(&docs, "Secret", "postgres-credentials"),
            "shop",
        )],
    );
    let hooks: Vec<Value> = example("hooks")
        .into_iter()
        .filter(|d| d["kind"] == "RestoreHook")
        .collect();
    scenarios::apply_hooks(cp, &hooks);
    let mut p = restored_pod.clone();
    p["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    p["spec"]["terminationGracePeriodSeconds"] = json!(0);
    p["spec"]["automountServiceAccountToken"] = json!(false);
    create(cp, &p);
    let done = wait_hooks_ended(cp, "shop", "postgres-0", Duration::from_secs(120));
    assert_eq!(
        phases(&done),
        pairs(&[
            ("postgres-rehydrate", "Succeeded"),
            ("postgres-rehydrate", "Succeeded"),
            ("zz-cache-warmup", "Succeeded")
        ]),
        "{}",
        status_text(&done)
    );
    analyzed(&velero_pg, database);
    assert_eq!(
        velero_pg.psql(
            database,
            "SELECT extname FROM pg_extension WHERE extname = 'pg_prewarm'"
        ),
        "pg_prewarm"
    );

    // 4. docs/hooks.md's annotation example, in a labelled restore namespace (no Velero label:
    // restore-hooks runs the annotation hooks; their creator, admin, may exec).
    let annotations = docs_annotation_example();
    let filenode = "SELECT pg_relation_filenode('orders_pkey')";
    let before = docs_pg.psql("app", filenode);
    namespace(cp, "docs", json!({NAMESPACE_LABEL: "r-docs"}));
    apply_list(
        cp,
        &[in_namespace(
            named(&docs, "Secret", "postgres-credentials"),
            "docs",
        )],
    );
    let mut p = pod(
        "docs",
        "db-0",
        &["db"],
        json!({"app": "postgres"}),
        annotations,
    );
    p["spec"]["containers"][0] = json!({"name": "db", "image": "postgres:17",
        "envFrom": [{"secretRef": {"name": "postgres-credentials"}}]});
    create(cp, &p);
    let done = wait_hooks_ended(cp, "docs", "db-0", Duration::from_secs(120));
    assert_eq!(
        phases(&done),
        pairs(&[("<from-annotation>", "Succeeded")]),
        "{}",
        status_text(&done)
    );
    assert_ne!(
        docs_pg.psql("app", filenode),
        before,
        "REINDEX DATABASE app rebuilt the index"
    );
    serve.assert_no_forbidden();
}

/// examples/mysql.yaml against a real MariaDB (Debian's; MySQL is not in Debian): the check
/// passes on a restored database, the migration adds the column and records itself once; on a
/// database restored empty the check fails and the migration is skipped, changing nothing.
#[test]
fn mysql_example_checks_and_migrates_a_real_database() {
    let docs = example("mysql");
    let secret = secret_data(named(&docs, "Secret", "mysql-credentials"));
    let (database, user, password) = (
        &secret["MYSQL_DATABASE"],
        &secret["MYSQL_USER"],
        &secret["MYSQL_PASSWORD"],
    );
    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;

    let restored = MariaDb::start(database, user, password);
    restored.root(&format!(
        "CREATE TABLE `{database}`.orders (id INT PRIMARY KEY, customer VARCHAR(64) NOT NULL); \
         INSERT INTO `{database}`.orders VALUES (1, 'ada'), (2, 'grace'), (3, 'edsger')"
    ));
    let empty = MariaDb::start(database, user, password);
    let container =
        &named(&docs, "StatefulSet", "mysql")["spec"]["template"]["spec"]["containers"][0];
    let secrets = kind_of(&docs, "Secret");
    for (ns, server) in [("my", &restored), ("my-empty", &empty)] {
        let mut env = container_env(container, &secrets);
        env.extend(server.client_env());
        exec_rule(cp, ns, "mysql-0", &env);
    }
    wait_for_exec_rules(cp, "mysql");

    apply_example(cp, "my", "r-my", &docs, &|_| {});
    let db = &ended_pods(cp, "my", "mysql", 1)[0];
    assert_eq!(
        phases(db),
        pairs(&[("mysql-check", "Succeeded"), ("mysql-migrate", "Succeeded")]),
        "{}",
        status_text(db)
    );
    assert_eq!(
        restored.root(&format!(
            "SELECT id, status FROM `{database}`.orders ORDER BY id"
        )),
        "1\topen\n2\topen\n3\topen"
    );
    assert_eq!(
        restored.root(&format!(
            "SELECT version, restore FROM `{database}`.schema_migrations"
        )),
        "2026-12-orders-status\tr-my"
    );
    wait_restore_run(cp, "r-my", &["Completed"], Duration::from_secs(60));

    apply_example(cp, "my-empty", "r-my-empty", &docs, &|_| {});
    let db = &ended_pods(cp, "my-empty", "mysql", 1)[0];
    assert_eq!(
        phases(db),
        pairs(&[("mysql-check", "Failed"), ("mysql-migrate", "Skipped")]),
        "{}",
        status_text(db)
    );
    assert_eq!(
        empty.root(&format!(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '{database}'"
        )),
        "0",
        "the skipped migration created nothing"
    );
    serve.assert_no_forbidden();
}

/// examples/redis.yaml against a real Redis: the check passes on restored keys, the migration
/// renames the `cart:*` keys (their values kept, other keys untouched) and records itself once;
/// on a server restored empty the check fails and the migration is skipped.
#[test]
fn redis_example_checks_and_migrates_a_real_server() {
    let docs = example("redis");
    let secret = secret_data(named(&docs, "Secret", "redis-credentials"));
    let install = Install::default_chart();
    let serve = install.start(0);
    let cp = &install.cp;

    let restored = Redis::start(&secret["REDIS_PASSWORD"]);
    restored.cli(&[
        "MSET", "cart:1", "apples", "cart:2", "pears", "user:1", "ada",
    ]);
    let empty = Redis::start(&secret["REDIS_PASSWORD"]);
    let container =
        &named(&docs, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0];
    let secrets = kind_of(&docs, "Secret");
    for (ns, server) in [("redis", &restored), ("redis-empty", &empty)] {
        let mut env = container_env(container, &secrets);
        let path = std::env::var("PATH").unwrap_or_default();
        env.push((
            "PATH".into(),
            format!("{}:{path}", server.client_bin().display()),
        ));
        exec_rule(cp, ns, "redis-0", &env);
    }
    wait_for_exec_rules(cp, "redis");

    apply_example(cp, "redis", "r-redis", &docs, &|_| {});
    let db = &ended_pods(cp, "redis", "redis", 1)[0];
    assert_eq!(
        phases(db),
        pairs(&[("redis-check", "Succeeded"), ("redis-migrate", "Succeeded")]),
        "{}",
        status_text(db)
    );
    let mut keys: Vec<String> = restored
        .cli(&["--scan"])
        .lines()
        .map(str::to_string)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        ["basket:1", "basket:2", "schema:migrations", "user:1"]
    );
    assert_eq!(
        restored.cli(&["MGET", "basket:1", "basket:2", "user:1"]),
        "apples\npears\nada"
    );
    assert_eq!(
        restored.cli(&["HGETALL", "schema:migrations"]),
        "2026-12-cart-to-basket\nr-redis"
    );
    wait_restore_run(cp, "r-redis", &["Completed"], Duration::from_secs(60));

    apply_example(cp, "redis-empty", "r-redis-empty", &docs, &|_| {});
    let db = &ended_pods(cp, "redis-empty", "redis", 1)[0];
    assert_eq!(
        phases(db),
        pairs(&[("redis-check", "Failed"), ("redis-migrate", "Skipped")]),
        "{}",
        status_text(db)
    );
    assert_eq!(
        empty.cli(&["DBSIZE"]),
        "0",
        "the skipped migration wrote nothing"
    );
    serve.assert_no_forbidden();
}
