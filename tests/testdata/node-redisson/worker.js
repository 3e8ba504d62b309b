// A Node worker for relock's interop test (tests/interop_node_test.go): it takes a lock with node-redisson
// (a Redisson-layout client nobody in relock wrote) and increments a shared counter under it, while Go
// workers using relock do the same on the same lock name.
//
// Environment: REDIS_PORT, LOCK_NAME, COUNTER_KEY, HOLDS (how many times to take the lock), PAUSE_MS (the
// pause between the counter's GET and SET), THINK_MS (the pause after a release, so that others get a
// turn), WATCHDOG_MS (node-redisson's lockWatchdogTimeout), GIVE_UP_MS (exit with an error after this long).
//
// It prints one line per event on stdout, a word then JSON:
//   ready {"channel": ..., "latch": ...}   connected; the channel and latch names node-redisson uses
//   clock {"us": ...}                      its wall clock, in reply to "clock" on stdin (the test measures
//                                          the offset between this process's clock and its own)
//   hold {"wait", "acq", "rel", "wake", "waits"}  one critical section: when lock() was called, when it
//                                          returned, when unlock() was called (microseconds on the wall
//                                          clock), and how its last pub/sub wait ended ("message",
//                                          "timeout", or "none" when it did not wait)
//   done {"holds", "messages", "timeouts"}
// It starts taking the lock when it reads "start" on stdin.
'use strict';

const readline = require('node:readline');
const { Redisson } = require('node-redisson');
const { SYMBOL_TIMEOUT } = require('node-redisson/dist/contracts/ICommandExecutor');

const env = (name) => {
  const v = process.env[name];
  if (v === undefined || v === '') {
    throw new Error(`${name} is not set`);
  }
  return v;
};

const port = Number(env('REDIS_PORT'));
const lockName = env('LOCK_NAME');
const counterKey = env('COUNTER_KEY');
const holds = Number(env('HOLDS'));
const pauseMs = Number(env('PAUSE_MS'));
const thinkMs = Number(env('THINK_MS'));
const watchdogMs = BigInt(env('WATCHDOG_MS'));

// A hung worker must not hang the test: the test kills it too, this is the worker's own bound.
setTimeout(() => {
  console.error(`worker: gave up after ${env('GIVE_UP_MS')} ms`);
  process.exit(3);
}, Number(env('GIVE_UP_MS'))).unref();

// Microseconds since the epoch, with sub-millisecond resolution (Date.now() has whole milliseconds only).
const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const emit = (word, obj) => process.stdout.write(`${word} ${JSON.stringify(obj)}\n`);

async function main() {
  const redisson = new Redisson({
    redis: { options: { host: '127.0.0.1', port, lazyConnect: false } },
    lockWatchdogTimeout: watchdogMs,
  });
  const executor = redisson.commandExecutor;
  // Instrumentation only: node-redisson waits for a release with waitSubscribeOnce(channel, timeout), which
  // resolves with the message or with SYMBOL_TIMEOUT. Count which.
  let lastWake = 'none';
  let waits = 0;
  let messages = 0;
  let timeouts = 0;
  const waitSubscribeOnce = executor.waitSubscribeOnce.bind(executor);
  executor.waitSubscribeOnce = async (channel, timeout) => {
    waits++;
    const result = await waitSubscribeOnce(channel, timeout);
    if (result === SYMBOL_TIMEOUT) {
      timeouts++;
      lastWake = 'timeout';
    } else {
      messages++;
      lastWake = 'message';
    }
    return result;
  };

  const redis = redisson.redis;
  await redis.ping();
  await executor.subscribeRedis.ping();
  const lock = redisson.getLock(lockName);
  emit('ready', { channel: lock.getChannelName(), latch: lock.getUnlockLatchName('<request>') });

  const input = readline.createInterface({ input: process.stdin });
  const lines = input[Symbol.asyncIterator]();
  for (;;) {
    const { value, done } = await lines.next();
    if (done) {
      throw new Error('stdin closed before "start"');
    }
    if (value === 'clock') {
      emit('clock', { us: nowUs() });
    } else if (value === 'start') {
      break;
    }
  }

  for (let i = 0; i < holds; i++) {
    lastWake = 'none';
    waits = 0;
    const wait = nowUs();
    await lock.lock();
    const acq = nowUs();
    const n = Number((await redis.get(counterKey)) ?? 0);
    await sleep(pauseMs);
    await redis.set(counterKey, String(n + 1));
    const rel = nowUs();
    await lock.unlock();
    emit('hold', { wait, acq, rel, wake: lastWake, waits });
    await sleep(thinkMs);
  }
  emit('done', { holds, messages, timeouts });
  input.close();
  await redisson.quit();
}

main().then(
  // node-redisson leaves its wait timers running after a wait ends (they fire later and unsubscribe), which
  // would keep the process alive for up to a lease: exit now.
  () => process.exit(0),
  (err) => {
    console.error('worker:', err && err.stack ? err.stack : err);
    process.exit(1);
  },
);
