// The official A2A JavaScript SDK's client (`@a2a-js/sdk`, pinned in package.json), through the
// gateway, for the gateway's A2A tests: a second client beside `tests/py/a2a_client.py`.
//
// Usage: node a2a_client.mjs GATEWAY_URL AGENT MODE [TEXT]
//
// The agent's stopline token comes from STOPLINE_TEST_TOKEN and rides on every request (card
// included) through the fetch the SDK is given. The client reads the card at
// GATEWAY_URL/a2a/AGENT/.well-known/agent-card.json (the SDK's card resolver, given the whole
// URL: it resolves its default path against the host, not the base's path) and talks to
// whatever URL the card names.
// Modes:
// - card: print {"ok": true, "card": CARD} as the SDK parsed it.
// - send TEXT: send one message (not streamed); print {"event": RESULT}.
// - stream TEXT: send one message streamed; print one {"event": EVENT} line per event as it
//   arrives, then {"end": "done"} or {"end": "error", "error": MESSAGE}.
// Every line printed is JSON; an error outside a stream is {"ok": false, "error": MESSAGE}.
import { randomUUID } from 'node:crypto';
import { SendMessageRequest } from '@a2a-js/sdk';
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} from '@a2a-js/sdk/client';

const [gateway, agent, mode, text] = process.argv.slice(2);
const token = process.env.STOPLINE_TEST_TOKEN;

const say = (value) =>
  process.stdout.write(
    JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? v.toString() : v)) + '\n',
  );

// Every request the SDK makes carries the agent's stopline token.
const fetchImpl = (url, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set('Authorization', `Bearer ${token}`);
  return fetch(url, { ...init, headers });
};

const base = `${gateway}/a2a/${agent}`;
const resolver = new DefaultAgentCardResolver({ fetchImpl });

async function main() {
  let card;
  try {
    card = await resolver.resolve(`${base}/.well-known/agent-card.json`, '');
  } catch (e) {
    say({ ok: false, error: String(e?.message ?? e) });
    return;
  }
  if (mode === 'card') {
    say({ ok: true, card });
    return;
  }
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl })],
      cardResolver: resolver,
    }),
  );
  const client = await factory.createFromAgentCard(card);
  const request = SendMessageRequest.fromJSON({
    message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }] },
  });
  if (mode === 'send') {
    try {
      say({ event: await client.sendMessage(request) });
    } catch (e) {
      say({ ok: false, error: String(e?.message ?? e) });
    }
  } else if (mode === 'stream') {
    try {
      for await (const event of client.sendMessageStream(request)) {
        say({ event });
      }
      say({ end: 'done' });
    } catch (e) {
      say({ end: 'error', error: String(e?.message ?? e) });
    }
  } else {
    say({ ok: false, error: `unknown mode ${mode}` });
  }
}

await main();
