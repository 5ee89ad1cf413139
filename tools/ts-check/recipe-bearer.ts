// npm/README.md's Bearer recipe ("Your own backend"), compiled as written (the block between
// the markers is the README's; src/lib.rs's `documented_options` tests check that it is).
import { PayonceClient } from "../../pkg/payonce.js";
declare const auth: { freshToken(): Promise<string> };

// README block start
const client = PayonceClient.create({
  baseUrl: "https://shop.example.com",
  credentials: "omit",
  headers: async () => ({ Authorization: `Bearer ${await auth.freshToken()}` }),
  endpoints: {
    pay: (orderId) => `https://shop.example.com/api/checkout/${encodeURIComponent(orderId)}/pay`,
    cancel: (orderId) => `https://shop.example.com/api/checkout/${encodeURIComponent(orderId)}/payment-attempts/cancel`,
  },
});
// README block end

export { client };
