// The error every payonce call rejects or throws with: a real `Error` (a stack, `instanceof
// Error`, `name`), built from Rust through the import in src/web/error.rs. Match on `code`
// (stable), never on `message` (for people).
export class PayonceError extends Error {
  constructor(code, message, status, problemCode, detail, body, cause) {
    // `cause` as `Error` sets it (own, not enumerable): the app's error behind TRANSPORT_FAILED.
    super(message, cause === undefined ? undefined : { cause });
    this.name = "PayonceError";
    this.code = code;
    if (status !== undefined) this.status = status;
    if (problemCode !== undefined) this.problemCode = problemCode;
    if (detail !== undefined) this.detail = detail;
    if (body !== undefined) this.body = body;
  }

  // `message` is not enumerable on an Error: without this JSON.stringify would show `{}`
  // (error trackers and logs serialize errors this way). The raw body stays out of it.
  toJSON() {
    return {
      name: this.name,
      code: this.code,
      message: this.message,
      status: this.status,
      problemCode: this.problemCode,
      detail: this.detail,
    };
  }
}
