-- Digests of the `--catalog` files installed (src/catalog.rs, `install`): the same file
-- again changes nothing. `IF NOT EXISTS`: servers before this migration created the table
-- at run time, and their databases must migrate cleanly with their catalog kept.
CREATE TABLE IF NOT EXISTS catalog_source (
    digest       TEXT PRIMARY KEY,
    installed_at BIGINT NOT NULL
);
