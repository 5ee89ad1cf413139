import { defineConfig } from "vite";

// The page is served either by payonce-server (`--static-dir www/dist`, same origin as the API)
// or by this dev server (API at VITE_PAYONCE_API). Relative `base` lets dist/ live under any path.
export default defineConfig({
  base: "./",
  server: {
    // 127.0.0.1, not localhost: the API's session cookie is SameSite, and 127.0.0.1:5173 and
    // 127.0.0.1:8080 are the same site, so the cookie flows with credentialed fetches.
    host: "127.0.0.1",
    port: 5173,
    // `payonce` is a symlink to ../pkg (a `file:` dependency); let the dev server read it.
    fs: { allow: [".", "../pkg"] },
  },
  // The web-target glue finds its .wasm through `new URL(..., import.meta.url)`; pre-bundling
  // would move the JS away from the .wasm, so the package is served as is.
  optimizeDeps: { exclude: ["payonce"] },
  build: { target: "es2022", outDir: "dist", emptyOutDir: true },
});
