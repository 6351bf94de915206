// nsqjs as a consumer only: a Reader that finds every nsqd of a topic through one nsqlookupd,
// finishes each message, and stops once it has the number of distinct bodies it was told to
// expect (tests/test_go_mixed_cluster.py: the nsqd are NSQ's and this project's, mixed).
//
//   node consume.js '{"lookupd": "http://127.0.0.1:4161", "topic": "t", "channel": "c",
//                     "count": 100, "features": {"snappy": true}}'
//
// Prints one JSON line: {"bodies": [<the distinct bodies, sorted>], "nsqd": [<"host:port" of every
// nsqd the Reader connected to, sorted>]}; exits 1 with the error on stderr otherwise.

const nsq = require('nsqjs');

const config = JSON.parse(process.argv[2]);
const seen = new Set();
const connected = new Set();

function fail(what, error) {
  console.error(`${what}: ${error && error.stack ? error.stack : error}`);
  process.exit(1);
}

const reader = new nsq.Reader(config.topic, config.channel, Object.assign({
  lookupdHTTPAddresses: config.lookupd, lookupdPollInterval: 1, maxInFlight: 50,
}, config.features));
reader.on('error', (error) => fail('reader', error));
reader.on('nsqd_connected', (host, port) => connected.add(`${host}:${port}`));
reader.on('message', (message) => {
  seen.add(message.body.toString());
  message.finish();
  if (seen.size === config.count) {
    console.log(JSON.stringify({ bodies: [...seen].sort(), nsqd: [...connected].sort() }));
    reader.close();
    setTimeout(() => process.exit(0), 100);
  }
});
reader.connect();
setTimeout(() => fail('timeout', `${seen.size} of ${config.count} messages in 30 s`), 30000);
