// Types of `payonce/payonce_bg.wasm`: bundlers that import a .wasm file as an asset
// (esbuild's `file` loader, webpack's `asset/resource`, Parcel's `url:`) give its URL.
// Hand it to init: `init({ module_or_path: wasmUrl })`.
declare const wasmUrl: string;
export default wasmUrl;
