// kafkajs (npm): the standard scenarios (convention: compat/kit.py).
//   node compat/kafkajs/scenarios.js BOOTSTRAP SCENARIO PREFIX
// kafkajs consumers always belong to a group (there is no assign()), so reading back what a
// scenario produced uses a group consumer too. Snappy comes from kafkajs-snappy, LZ4 from lz4js
// (pure JavaScript, framed LZ4); the zstd codec kafkajs documents needs a native build.
'use strict';

const {
  Kafka, logLevel, CompressionTypes, CompressionCodecs, ConfigResourceTypes,
} = require('kafkajs');
const SnappyCodec = require('kafkajs-snappy');
const lz4js = require('lz4js');

// LZ4 codec: kafkajs calls the codec factory and expects compress/decompress of framed LZ4.
const LZ4Codec = () => ({
  async compress(encoder) { return Buffer.from(lz4js.compress(encoder.buffer)); },
  async decompress(buffer) { return Buffer.from(lz4js.decompress(buffer)); },
});

CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec;
CompressionCodecs[CompressionTypes.LZ4] = LZ4Codec;

const WAIT_MS = 30000;
const [bootstrap, scenarioName, prefix] = process.argv.slice(2);

class NotApplicable extends Error {}
class Failed extends Error {}

function expect(cond, what) {
  if (!cond) throw new Failed(what);
}

const kafka = new Kafka({
  clientId: 'headrace-compat',
  brokers: [bootstrap],
  logLevel: logLevel.ERROR,
  retry: { retries: 5, initialRetryTime: 200 },
  requestTimeout: 20000,
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitUntil(cond, what, timeout = WAIT_MS) {
  const deadline = Date.now() + timeout;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Failed(`timed out after ${timeout / 1000}s waiting for ${what}`);
    await sleep(100);
  }
}

function records(n, partitions) {
  const out = [];
  for (let i = 0; i < n; i++) {
    out.push({
      partition: i % partitions,
      key: `k${i}`,
      value: `value-${i}-`.repeat(8),
      headers: { seq: String(i), src: 'compat' },
    });
  }
  return out;
}

async function withAdmin(fn) {
  const admin = kafka.admin();
  await admin.connect();
  try {
    return await fn(admin);
  } finally {
    await admin.disconnect();
  }
}

async function createTopic(topic, numPartitions, configEntries = []) {
  await withAdmin((admin) => admin.createTopics({
    topics: [{ topic, numPartitions, replicationFactor: 1, configEntries }],
    waitForLeaders: true,
  }));
}

async function produce(topic, recs, options = {}, compression = CompressionTypes.None) {
  const producer = kafka.producer(options);
  await producer.connect();
  try {
    for (let i = 0; i < recs.length; i += 100) {
      await producer.send({ topic, compression, acks: -1, messages: recs.slice(i, i + 100) });
    }
  } finally {
    await producer.disconnect();
  }
}

async function readAll(topic, count, groupId, extra = {}) {
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 200, ...extra });
  const got = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        const headers = {};
        for (const [k, v] of Object.entries(message.headers || {})) headers[k] = v.toString();
        got.push({
          partition,
          key: message.key && message.key.toString(),
          value: message.value.toString(),
          headers,
        });
      },
    });
    await waitUntil(() => got.length >= count, `${count} records (read ${got.length})`);
  } finally {
    await consumer.disconnect();
  }
  return got;
}

function checkRecords(sent, got) {
  const by = (list) => {
    const m = new Map();
    for (const r of list) {
      if (!m.has(r.partition)) m.set(r.partition, []);
      m.get(r.partition).push(JSON.stringify([r.key, r.value, r.headers]));
    }
    return m;
  };
  const want = by(sent);
  const have = by(got);
  for (const p of new Set([...want.keys(), ...have.keys()])) {
    const w = want.get(p) || [];
    const h = have.get(p) || [];
    expect(w.length === h.length, `partition ${p}: sent ${w.length} records, read ${h.length}`);
    for (let i = 0; i < w.length; i++) {
      expect(w[i] === h[i], `partition ${p} record ${i}: sent ${w[i].slice(0, 120)}, read ${h[i].slice(0, 120)}`);
    }
  }
}

const CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
};

function produceConsume(name) {
  return async () => {
    if (!(name in CODECS)) throw new NotApplicable('kafkajs has no zstd codec without a native build (@kafkajs/zstd)');
    const topic = `${prefix}-t`;
    await createTopic(topic, 3);
    const recs = records(300, 3);
    await produce(topic, recs, {}, CODECS[name]);
    checkRecords(recs, await readAll(topic, recs.length, `${prefix}-reader`));
  };
}

async function idempotent() {
  const topic = `${prefix}-t`;
  await createTopic(topic, 2);
  const recs = records(2000, 2);
  await produce(topic, recs, { idempotent: true, maxInFlightRequests: 1 });
  checkRecords(recs, await readAll(topic, recs.length, `${prefix}-reader`));
}

async function group() {
  const topic = `${prefix}-t`;
  const groupId = `${prefix}-g`;
  await createTopic(topic, 4);
  const recs = records(400, 4);
  await produce(topic, recs);
  const seen = new Set();
  const assigned = [[], []];
  const members = [0, 1].map((i) => {
    const c = kafka.consumer({
      groupId, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 200,
      rebalanceTimeout: 20000,
    });
    c.on(c.events.GROUP_JOIN, (e) => {
      assigned[i] = (e.payload.memberAssignment[topic] || []).slice();
    });
    return c;
  });
  const start = async (i) => {
    const c = members[i];
    await c.connect();
    await c.subscribe({ topics: [topic], fromBeginning: true });
    await c.run({
      autoCommitInterval: 100,
      eachMessage: async ({ partition, message }) => { seen.add(`${partition}/${message.key}`); },
    });
  };
  try {
    await start(0);
    await waitUntil(() => assigned[0].length === 4, 'the first consumer to be assigned all 4 partitions');
    await start(1);
    await waitUntil(() => {
      const [a, b] = assigned;
      return a.length > 0 && b.length > 0 && a.length + b.length === 4
        && a.every((p) => !b.includes(p));
    }, 'a rebalance sharing 4 partitions between 2 consumers');
    await waitUntil(() => seen.size === recs.length, `all ${recs.length} records through the group`);
    await sleep(500);
  } finally {
    for (const c of members) await c.disconnect();
  }
  const offsets = await withAdmin((admin) => admin.fetchOffsets({ groupId, topics: [topic] }));
  const got = {};
  for (const { partition, offset } of offsets[0].partitions) got[partition] = offset;
  expect(JSON.stringify(got) === JSON.stringify({ 0: '100', 1: '100', 2: '100', 3: '100' }),
    `committed offsets ${JSON.stringify(got)}, want 100 each`);
}

async function admin() {
  const topic = `${prefix}-t`;
  await withAdmin(async (a) => {
    await a.createTopics({
      topics: [{ topic, numPartitions: 3, replicationFactor: 1, configEntries: [{ name: 'retention.ms', value: '3600000' }] }],
      waitForLeaders: true,
    });
    expect((await a.listTopics()).includes(topic), 'created topic not listed');
    const meta = await a.fetchTopicMetadata({ topics: [topic] });
    expect(meta.topics[0].partitions.length === 3, `described ${meta.topics[0].partitions.length} partitions, want 3`);
    const cfg = await a.describeConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }], includeSynonyms: false,
    });
    const entry = cfg.resources[0].configEntries.find((e) => e.configName === 'retention.ms');
    expect(entry && entry.configValue === '3600000', `retention.ms described as ${JSON.stringify(entry)}`);
    await a.createPartitions({ topicPartitions: [{ topic, count: 5 }] });
    await waitUntil(async () => (await a.fetchTopicMetadata({ topics: [topic] })).topics[0].partitions.length === 5,
      '5 partitions after CreatePartitions');
    await a.deleteTopics({ topics: [topic] });
    await waitUntil(async () => !(await a.listTopics()).includes(topic), 'the deleted topic to disappear');
  });
}

async function alterConfigs() {
  const topic = `${prefix}-t`;
  await createTopic(topic, 1);
  await withAdmin(async (a) => {
    await a.alterConfigs({
      validateOnly: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: 'retention.ms', value: '12345' }] }],
    });
    const cfg = await a.describeConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }], includeSynonyms: false });
    const entry = cfg.resources[0].configEntries.find((e) => e.configName === 'retention.ms');
    expect(entry && entry.configValue === '12345', `retention.ms is ${JSON.stringify(entry)} after the change`);
  });
}

async function transactions() {
  const topic = `${prefix}-t`;
  await createTopic(topic, 1);
  const producer = kafka.producer({ transactionalId: `${prefix}-tx`, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  try {
    let txn = await producer.transaction();
    await txn.send({ topic, messages: Array.from({ length: 10 }, (_, i) => ({ partition: 0, value: `committed-${i}` })) });
    await txn.commit();
    txn = await producer.transaction();
    await txn.send({ topic, messages: Array.from({ length: 5 }, (_, i) => ({ partition: 0, value: `aborted-${i}` })) });
    await txn.abort();
    txn = await producer.transaction();
    await txn.send({ topic, messages: [{ partition: 0, value: 'committed-last' }] });
    await txn.commit();
  } finally {
    await producer.disconnect();
  }
  const got = await readAll(topic, 11, `${prefix}-reader`, { readUncommitted: false });
  await sleep(1000);
  const values = got.map((r) => r.value);
  const want = [...Array.from({ length: 10 }, (_, i) => `committed-${i}`), 'committed-last'];
  expect(JSON.stringify(values) === JSON.stringify(want), `read_committed consumer read ${JSON.stringify(values)}`);
}

const SCENARIOS = {
  'produce-none': produceConsume('none'),
  'produce-gzip': produceConsume('gzip'),
  'produce-snappy': produceConsume('snappy'),
  'produce-lz4': produceConsume('lz4'),
  'produce-zstd': produceConsume('zstd'),
  idempotent,
  group,
  admin,
  'alter-configs': alterConfigs,
  transactions,
};

async function main() {
  const fn = SCENARIOS[scenarioName];
  if (!fn) { // a name this program does not know fails; n/a is only what a scenario declares
    console.log(`RESULT fail unknown scenario ${scenarioName}`);
    return 1;
  }
  try {
    await fn();
    console.log('RESULT pass');
    return 0;
  } catch (e) {
    if (e instanceof NotApplicable) {
      console.log(`RESULT n/a ${e.message}`);
      return 0;
    }
    console.error(e);
    const cause = e.cause ? ` (cause: ${e.cause.name}: ${e.cause.message})` : '';
    console.log(`RESULT fail ${e.name}: ${e.message}${cause}`.replace(/\s+/g, ' '));
    return 1;
  }
}

main().then((code) => process.exit(code));
