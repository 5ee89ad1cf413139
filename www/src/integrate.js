// Paying with Stripe through payonce: the code docs/integrate.md shows (a test holds the page
// to this file, byte for byte) and www/e2e/stripe-integrate.test.mjs runs in Chromium.

/**
 * The PaymentMethod id of the card the customer typed into Stripe Elements' card field
 * (`stripe.elements().create("card")`, mounted in your form). The card number goes from
 * Stripe's frame to Stripe: your page and your backend only ever see the `pm_…` id.
 */
export async function paymentMethodFromCard(stripe, card) {
  const { paymentMethod, error } = await stripe.createPaymentMethod({ type: "card", card });
  if (error) throw new Error(error.message);
  return paymentMethod.id;
}

/**
 * Pays `checkout` (`{ orderId, orderVersion, paymentMethodId }`) with `client` (a
 * `PayonceClient`). When the bank asks for 3-D Secure, the server answers `actionRequired`
 * with Stripe's client secret; Stripe.js runs the challenge, then the same checkout is paid
 * again: the SDK sends the same key, and the server reads the outcome from Stripe.
 */
export async function payWithStripe(client, stripe, checkout) {
  let outcome = await client.pay(checkout);
  for (let round = 0; outcome.kind === "actionRequired" && round < 3; round++) {
    if (outcome.next?.type !== "stripe") return outcome; // another backend's action
    // Whatever Stripe.js reports, paying again asks the server, which asks Stripe.
    await stripe.confirmCardPayment(outcome.next.clientSecret);
    outcome = await client.pay(checkout);
  }
  return outcome; // paid, declined, expired, pending… (docs/integrate.md, step 5)
}
