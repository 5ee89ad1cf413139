// npm/README.md's 3-D Secure recipe, compiled as written (the block between the markers is
// the README's; src/lib.rs's `documented_options` tests check that it is). What the recipe
// takes from the page is declared first: a client, Stripe.js's global, a popup helper.
import type { PayonceClient } from "../../pkg/payonce.js";
declare const client: PayonceClient;
declare function Stripe(key: string): {
  confirmCardPayment(clientSecret: string): Promise<{ error?: { message?: string } }>;
};
declare function openAndWaitForClose(url: string): Promise<void>;

// README block start
import { isNextAction, type Checkout, type PayOutcome } from "../../pkg/payonce.js";

async function payWith3ds(checkout: Checkout): Promise<PayOutcome> {
  const outcome = await client.pay(checkout);
  if (outcome.kind !== "actionRequired") return outcome;
  const next = outcome.next;
  if (!isNextAction(next)) throw new Error("this backend sends another kind of next action");
  if (next.type === "stripe") {
    // --provider stripe: Stripe.js finishes the PaymentIntent the server created and
    // confirmed (its 3-D Secure challenge runs in Stripe's own frame).
    const stripe = Stripe("pk_test_…"); // <script src="https://js.stripe.com/v3/">
    const { error } = await stripe.confirmCardPayment(next.clientSecret);
    if (error) console.warn("3-D Secure not completed:", error.message); // the pay below says what happened
  } else {
    // The mock provider (--dev): its challenge page, in a popup; pay again when it closes.
    await openAndWaitForClose(next.url);
  }
  return client.pay(checkout); // same checkout, same key: paid, declined or still actionRequired
}
// README block end

export { payWith3ds };
