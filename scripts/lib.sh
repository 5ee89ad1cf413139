# Shared helpers for the scripts in this folder; source it, do not run it.

# The version of the `payonce` crate (Cargo.toml), which the npm package and version() must match.
payonce_version() {
  cargo metadata --no-deps --format-version 1 | node -e '
    let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
      console.log(JSON.parse(s).packages.find((p) => p.name === "payonce").version);
    });'
}
