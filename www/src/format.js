// Amounts travel as integers in the currency's minor unit; only the display divides.

const formatters = new Map();

function formatter(currency) {
  let f = formatters.get(currency);
  if (!f) {
    f = new Intl.NumberFormat("en-US", { style: "currency", currency });
    formatters.set(currency, f);
  }
  return f;
}

/** `formatMoney(1999, "USD")` → `"$19.99"`; `formatMoney(500, "JPY")` → `"¥500"`. */
export function formatMoney(minor, currency) {
  const f = formatter(currency || "USD");
  // The currency's own number of decimals (2 for USD, 0 for JPY, 3 for KWD).
  const digits = f.resolvedOptions().maximumFractionDigits ?? 2;
  return f.format(minor / 10 ** digits);
}

export function shortId(id, n = 10) {
  if (!id) return "";
  return id.length > n + 1 ? `${id.slice(0, n)}…` : id;
}
