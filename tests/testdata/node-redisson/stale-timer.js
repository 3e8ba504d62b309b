// A reproduction of a node-redisson 1.0.4 bug that the interop test steers clear of (it is not relock's): a
// wait for a release leaves its timeout timer running after the release message has ended the wait, and
// when the timer fires it UNSUBSCRIBEs the lock's channel, on the connection that every wait of the process
// shares. A wait in progress at that moment no longer hears releases and lasts until its own timeout (the
// holder's remaining lease). node-redisson only: no relock here.
//
//   REDIS_PORT=<port of a scratch Redis on 127.0.0.1> node stale-timer.js    (it uses the key "stale-timer-demo")
//
// Prints when B gets the lock the second time: about 1 s in with a correct client, about 10 s with 1.0.4.
'use strict';

const { Redisson } = require('node-redisson');

const port = Number(process.env.REDIS_PORT);
if (!port) {
  console.error('set REDIS_PORT');
  process.exit(2);
}
const client = () => new Redisson({ redis: { options: { host: '127.0.0.1', port } } });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

(async () => {
  const a = client().getLock('stale-timer-demo');
  const b = client().getLock('stale-timer-demo');
  const t0 = Date.now();
  const at = () => `${Date.now() - t0} ms`;

  await a.tryLock(0, 500); // A holds with a 500 ms lease: B's first wait sets a 500 ms timer
  const first = b.lock();
  await sleep(100);
  await a.unlock();
  await first; // the release message ends B's wait; its timer keeps running
  console.log(`B got the lock after A's 1st release (${at()})`);
  await b.unlock();

  await a.tryLock(0, 10000); // A holds with a 10 s lease: B waits again, with a 10 s timer
  const second = b.lock();
  await sleep(1000); // meanwhile, at 500 ms, the first timer unsubscribes the channel
  await a.unlock();
  console.log(`A released again (${at()})`);
  await second;
  console.log(`B got the lock after A's 2nd release (${at()})`);
  await b.unlock();
  process.exit(0);
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
