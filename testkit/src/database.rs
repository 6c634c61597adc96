//! A fresh database for each test that opens control's store (issue 44): a temp SQLite file
//! always, and a fresh PostgreSQL schema when `SWITCHBOARD_TEST_DATABASE_URL` is set. The one
//! place the store's suite (`store/tests/`), the end-to-end control tests (`tests/all/`) and
//! the benchmarks get their databases from. This hands out URLs; the caller opens the store on
//! one itself, so this crate needs no store and the store's tests take it without a cycle.
//!
//! A PostgreSQL test database is a schema of the database the variable names, and its URL is
//! that URL with `options=-c search_path=<schema>`, so every connection of a pool opened on it
//! lands in the schema. [`TestDatabase::run`] removes the file or the schema after the test,
//! even when the test panics. Without the variable a PostgreSQL variant gets no database and
//! checks nothing, which is said once per test binary.

use std::future::Future;
use std::sync::{Arc, Mutex, Once};

use sqlx::{AssertSqlSafe, Connection};

/// The variable naming the PostgreSQL database tests make their schemas in.
pub const DATABASE_URL_VAR: &str = "SWITCHBOARD_TEST_DATABASE_URL";

/// What a schema-scoped URL carries after its `?` or `&`; the schema's name follows.
const SEARCH_PATH: &str = "options=-c%20search_path%3D";

/// The backends the store runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh, empty database: its URL, and what to remove after the test.
pub struct TestDatabase {
    url: String,
    backend: Backend,
    place: Place,
    beside: Beside,
}

enum Place {
    /// The SQLite file's temp folder, removed with everything in it.
    Folder(tempfile::TempDir),
    /// A schema of the PostgreSQL database at `base`.
    Schema { base: String, name: String },
}

/// Makes more empty databases beside a test's (an upgrade test opens one at an earlier schema),
/// removed with it: SQLite files in its temp folder, or schemas of its PostgreSQL database.
/// Cloned into the test while the harness keeps the database.
#[derive(Clone)]
pub struct Beside {
    /// The temp folder's path, or the PostgreSQL database's URL.
    at: String,
    backend: Backend,
    /// The schemas made and not yet removed.
    schemas: Arc<Mutex<Vec<String>>>,
}

impl TestDatabase {
    /// A fresh database of `backend`: `control.db` in a new temp folder, or a new schema of the
    /// database at `SWITCHBOARD_TEST_DATABASE_URL`. `None` for PostgreSQL when the variable is
    /// unset (see [`postgres_base`]).
    pub async fn create(backend: Backend) -> Option<TestDatabase> {
        match backend {
            Backend::Sqlite => Some(TestDatabase::sqlite()),
            Backend::Postgres => Some(TestDatabase::postgres_in(&postgres_base()?, "t").await),
        }
    }

    /// A fresh SQLite database: `control.db` in a new temp folder.
    pub fn sqlite() -> TestDatabase {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = sqlite_url(&dir.path().join("control.db").display().to_string());
        TestDatabase {
            url,
            backend: Backend::Sqlite,
            beside: Beside::new(Backend::Sqlite, dir.path().display().to_string()),
            place: Place::Folder(dir),
        }
    }

    /// A fresh schema `<prefix>_<random hex>` in the PostgreSQL database at `base`.
    pub async fn postgres_in(base: &str, prefix: &str) -> TestDatabase {
        let name = format!("{prefix}_{}", random_hex());
        execute(
            base,
            &format!("CREATE SCHEMA {name}"),
            "create the test schema",
        )
        .await;
        TestDatabase {
            url: scoped(base, &name),
            backend: Backend::Postgres,
            beside: Beside::new(Backend::Postgres, base.to_string()),
            place: Place::Schema {
                base: base.to_string(),
                name,
            },
        }
    }

    /// The URL to open the database with (another process may open it too).
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// What makes more databases beside this one, removed with it.
    pub fn beside(&self) -> Beside {
        self.beside.clone()
    }

    /// Removes the database: the temp folder, or the schema with everything in it; and the
    /// databases made beside it.
    pub async fn remove(self) {
        self.beside.remove_all().await;
        match self.place {
            Place::Folder(dir) => drop(dir),
            Place::Schema { base, name } => {
                let drop = format!("DROP SCHEMA {name} CASCADE");
                execute(&base, &drop, "drop the test schema").await;
            }
        }
    }

    /// Runs `test` on a task of its own, then `after` (closing what the caller opened on the
    /// database), then removes the database — also when `test` panicked, whose panic then goes
    /// on.
    pub async fn run<T, A>(self, test: T, after: A)
    where
        T: Future<Output = ()> + Send + 'static,
        A: Future<Output = ()>,
    {
        let outcome = tokio::spawn(test).await;
        after.await;
        self.remove().await;
        if let Err(e) = outcome {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// `SWITCHBOARD_TEST_DATABASE_URL`, or `None` when it is unset; then it says once (per test
/// binary) that the PostgreSQL variants check nothing.
pub fn postgres_base() -> Option<String> {
    let base = std::env::var(DATABASE_URL_VAR).ok();
    if base.is_none() {
        static NOTE: Once = Once::new();
        NOTE.call_once(|| {
            eprintln!("{DATABASE_URL_VAR} is unset: the postgres variants check nothing");
        });
    }
    base
}

impl Beside {
    fn new(backend: Backend, at: String) -> Beside {
        Beside {
            at,
            backend,
            schemas: Arc::default(),
        }
    }

    /// Another empty database beside the test's, and its URL: a second SQLite file in the
    /// test's temp folder, or a second schema of its PostgreSQL database.
    pub async fn create(&self) -> String {
        let name = format!("u_{}", random_hex());
        match self.backend {
            Backend::Sqlite => sqlite_url(&format!("{}/{name}.db", self.at)),
            Backend::Postgres => {
                let create = format!("CREATE SCHEMA {name}");
                execute(&self.at, &create, "create the second schema").await;
                let url = scoped(&self.at, &name);
                self.schemas.lock().expect("the schema list").push(name);
                url
            }
        }
    }

    /// Removes a database [`Beside::create`] made now rather than with the test's (the SQLite
    /// file stays until its folder goes).
    pub async fn remove(&self, url: &str) {
        let Some((_, name)) = url.split_once(SEARCH_PATH) else {
            return;
        };
        let made = {
            let mut schemas = self.schemas.lock().expect("the schema list");
            let before = schemas.len();
            schemas.retain(|s| s != name);
            schemas.len() < before
        };
        if made {
            let drop = format!("DROP SCHEMA {name} CASCADE");
            execute(&self.at, &drop, "drop the second schema").await;
        }
    }

    async fn remove_all(&self) {
        let schemas = std::mem::take(&mut *self.schemas.lock().expect("the schema list"));
        for name in schemas {
            let drop = format!("DROP SCHEMA {name} CASCADE");
            execute(&self.at, &drop, "drop the second schema").await;
        }
    }
}

/// The URL of the SQLite database at `path`, created on first open.
fn sqlite_url(path: &str) -> String {
    format!("sqlite://{path}?mode=rwc")
}

/// `base` scoped to `schema`: every connection opened on it finds its tables there.
fn scoped(base: &str, schema: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}{SEARCH_PATH}{schema}")
}

/// Runs one statement on its own connection to the PostgreSQL database at `base`.
async fn execute(base: &str, statement: &str, what: &str) {
    sqlx::any::install_default_drivers();
    let mut admin = sqlx::AnyConnection::connect(base)
        .await
        .expect("connect to the test database");
    sqlx::query(AssertSqlSafe(statement.to_string()))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    admin.close().await.expect("close the admin connection");
}

/// 64 random bits in hex: a name no other test run picks.
fn random_hex() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the os random source");
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_sqlite_file_sits_beside_the_first() {
        let db = TestDatabase::sqlite();
        let second = db.beside().create().await;
        let folder = db
            .url()
            .strip_suffix("/control.db?mode=rwc")
            .expect("a sqlite url");
        assert!(second.starts_with(&format!("{folder}/u_")), "{second}");
        assert!(second.ends_with(".db?mode=rwc"), "{second}");
        let path = folder
            .strip_prefix("sqlite://")
            .expect("a path")
            .to_string();
        db.remove().await;
        assert!(!std::path::Path::new(&path).exists(), "the folder is gone");
    }

    #[tokio::test]
    async fn a_database_and_those_beside_it_go_even_when_the_test_panics() {
        for backend in [Backend::Sqlite, Backend::Postgres] {
            let Some(db) = TestDatabase::create(backend).await else {
                continue;
            };
            let (url, second) = (db.url().to_string(), db.beside().create().await);
            let test = db.run(async { panic!("the test fails") }, async {});
            let outcome = tokio::spawn(test).await;
            assert!(outcome.is_err_and(|e| e.is_panic()), "the panic goes on");
            match backend {
                Backend::Sqlite => {
                    let file = url.strip_prefix("sqlite://").expect("a sqlite url");
                    let file = file.split('?').next().expect("a path");
                    assert!(!std::path::Path::new(file).exists(), "{file} is gone");
                }
                Backend::Postgres => {
                    use sqlx::Row;
                    let base = postgres_base().expect("the variable is set");
                    let mut conn = sqlx::AnyConnection::connect(&base).await.expect("connect");
                    for scoped in [&url, &second] {
                        let (_, name) = scoped.split_once(SEARCH_PATH).expect("a scoped url");
                        let row = sqlx::query(
                            "SELECT COUNT(*) AS n FROM pg_namespace WHERE nspname = $1",
                        )
                        .bind(name.to_string())
                        .fetch_one(&mut conn)
                        .await
                        .expect("count");
                        let n: i64 = row.try_get("n").expect("n");
                        assert_eq!(n, 0, "schema {name} is gone");
                    }
                    conn.close().await.expect("close");
                }
            }
        }
    }

    #[test]
    fn urls_are_scoped_to_their_schema() {
        assert_eq!(
            scoped("postgres://h/test", "t_1"),
            "postgres://h/test?options=-c%20search_path%3Dt_1"
        );
        assert_eq!(
            scoped("postgres://h/test?sslmode=disable", "t_1"),
            "postgres://h/test?sslmode=disable&options=-c%20search_path%3Dt_1"
        );
    }
}
