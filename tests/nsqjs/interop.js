// nsqjs against this project's daemons, as a Node.js program using NSQ would: publish with
// MPUB, PUB and DPUB through a Writer on one nsqd, consume through a Reader that finds the
// nsqd through nsqlookupd, requeue one message once, finish everything.
//
//   node interop.js '{"nsqd": "127.0.0.1:4150", "lookupd": "http://127.0.0.1:4161",
//                     "topic": "t", "count": 100, "features": {"snappy": true}}'
//
// Prints one JSON line: {"received": <distinct bodies finished>, "requeued_attempts": <the
// requeued message's attempts when it came back>, "deferred_after_ms": <how long after its
// DPUB the deferred message arrived>}; exits 1 with the error on stderr otherwise.

const nsq = require('nsqjs');

const config = JSON.parse(process.argv[2]);
const [host, port] = config.nsqd.split(':');
const features = Object.assign({ tlsVerification: false }, config.features);
const DEFER_MS = 500;
const REQUEUED = 'msg-3';

function fail(what, error) {
  console.error(`${what}: ${error && error.stack ? error.stack : error}`);
  process.exit(1);
}

function publishAll(writer, done) {
  const bodies = Array.from({ length: config.count }, (_, i) => `msg-${i}`);
  const half = Math.floor(config.count / 2);
  writer.publish(config.topic, bodies.slice(0, half), (error) => {
    if (error) fail('MPUB', error);
    let left = bodies.length - half;
    for (const body of bodies.slice(half)) {
      writer.publish(config.topic, body, (pubError) => {
        if (pubError) fail('PUB', pubError);
        left -= 1;
        if (left === 0) done();
      });
    }
  });
}

function consume(writer) {
  const seen = new Set();
  const result = { received: 0, requeued_attempts: null, deferred_after_ms: null };
  let deferredAt = null;
  const reader = new nsq.Reader(config.topic, 'nsqjs', Object.assign({
    lookupdHTTPAddresses: config.lookupd, lookupdPollInterval: 1, maxInFlight: 50,
  }, features));
  reader.on('error', (error) => fail('reader', error));
  reader.on('nsqd_connected', () => {
    if (deferredAt !== null) return;
    deferredAt = Date.now();
    writer.deferPublish(config.topic, ['deferred'], DEFER_MS, (error) => { if (error) fail('DPUB', error); });
  });
  reader.on('message', (message) => {
    const body = message.body.toString();
    if (body === REQUEUED && message.attempts === 1) {
      message.requeue(0, false);
      return;
    }
    if (body === REQUEUED) result.requeued_attempts = message.attempts;
    if (body === 'deferred') result.deferred_after_ms = Date.now() - deferredAt;
    seen.add(body);
    message.finish();
    if (seen.size === config.count + 1) {
      result.received = seen.size - 1;
      console.log(JSON.stringify(result));
      reader.close();
      writer.close();
      setTimeout(() => process.exit(0), 100);
    }
  });
  reader.connect();
}

const writer = new nsq.Writer(host, parseInt(port, 10), features);
writer.on('error', (error) => fail('writer', error));
writer.on('ready', () => publishAll(writer, () => consume(writer)));
writer.connect();
setTimeout(() => fail('timeout', `${config.count} messages not all received in 30 s`), 30000);
