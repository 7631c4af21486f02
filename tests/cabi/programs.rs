//! Runs the C test programs in `tests/c/` against the crate's static
//! library: builds the library (`cargo build --lib`), compiles each program
//! with the system C compiler (`$CC`, default `cc`) as C11 with
//! `-Wall -Wextra -Werror`, runs it, and checks that every case passed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The static library, built once per test run.
fn staticlib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        // target/<profile>/deps/cabi-<hash> -> target/<profile>
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        // A target dir of its own: a plain `--lib` build resolves features
        // without the dev-dependencies, and its second copy of a crate
        // (mio) in the shared deps folder would confuse the doc tests.
        let target_dir = profile_dir.parent().expect("target dir").join("cabi-build");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--lib", "--quiet", "--target-dir"])
            .arg(&target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("run cargo build --lib");
        assert!(st.success(), "cargo build --lib failed");
        let profile = profile_dir.file_name().expect("profile name");
        target_dir.join(profile).join("libfutoin_asyncsteps.a")
    })
}

/// Compiles `tests/c/<name>.c` (plus `extra` flags) and returns the binary.
fn compile(name: &str, lang_flags: &[&str]) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::temp_dir().join(format!("futoin-c-{name}-{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(cc)
        .args(lang_flags)
        .args(["-Wall", "-Wextra", "-Werror", "-g", "-I"])
        .arg(root.join("include"))
        .arg(root.join("tests/c").join(format!("{name}.c")))
        .arg(staticlib())
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&out)
        .status()
        .expect("run the C compiler");
    assert!(st.success(), "compiling tests/c/{name}.c failed");
    out
}

/// Runs a compiled test program; its stdout lists the cases.
fn run(bin: &Path) -> String {
    let out = Command::new(bin).output().expect("run the C test program");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_file(bin);
    assert!(
        out.status.success(),
        "C test program failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout
}

#[test]
fn c_api_program_passes() {
    let stdout = run(&compile("api", &["-std=c11"]));
    assert!(stdout.ends_with("0 failures\n"), "{stdout}");
    // Every case reported (a case silently skipped would not be listed).
    let cases = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(cases, 41, "{stdout}");
}

/// `tests/c/more.c`: state variables, the AsyncTool entries, root ids and
/// new instances, every kind of value, sync objects, and cancel and
/// completion from threads that run no loop.
#[test]
fn c_more_program_passes() {
    let stdout = run(&compile("more", &["-std=c11"]));
    assert!(stdout.ends_with("0 failures\n"), "{stdout}");
    let cases = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(cases, 52, "{stdout}");
}

/// The header compiles as C++ too (with a C++ compiler, `$CXX` or `c++`).
#[test]
fn header_compiles_as_cpp() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let st = Command::new(cxx)
        .args([
            "-x",
            "c++",
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(root.join("include"))
        .args(["-include", "futoin_asyncsteps.h", "/dev/null"])
        .status()
        .expect("run the C++ compiler");
    assert!(st.success(), "the header does not compile as C++");
}
