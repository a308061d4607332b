package dev.headrace.compat;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The standard compatibility scenarios for the Java client (see compat/kit.py for the
 * convention): {@code Suite BOOTSTRAP SCENARIO PREFIX} prints {@code RESULT pass},
 * {@code RESULT n/a WHY} or {@code RESULT fail REASON} as its last line.
 */
public final class Suite {
    private static final long WAIT_S = 30;
    private static String bootstrap;
    private static String prefix;

    public static void main(String[] args) {
        if (args.length != 3) {
            System.err.println("usage: Suite BOOTSTRAP SCENARIO PREFIX");
            System.exit(2);
        }
        bootstrap = args[0];
        prefix = args[2];
        int code = 0;
        try {
            run(args[1]);
            System.out.println("RESULT pass");
        } catch (NotApplicable e) {
            System.out.println("RESULT n/a " + e.getMessage());
        } catch (Throwable e) {
            Throwable cause = e;
            while ((cause instanceof ExecutionException || cause.getCause() != null
                    && cause.getMessage() == null) && cause.getCause() != null) {
                cause = cause.getCause();
            }
            e.printStackTrace();
            String reason = cause.getClass().getName() + ": " + cause.getMessage();
            if (cause != e) reason = e.getClass().getSimpleName() + " <- " + reason;
            System.out.println("RESULT fail " + reason.replaceAll("\\s+", " "));
            code = 1;
        }
        System.out.flush();
        System.exit(code);  // do not wait for client threads still retrying in the background
    }

    static final class NotApplicable extends Exception {
        NotApplicable(String why) { super(why); }
    }

    static final class Failed extends RuntimeException {
        Failed(String why) { super(why); }
    }

    private static void run(String scenario) throws Exception {
        switch (scenario) {
            case "produce-none", "produce-gzip", "produce-snappy", "produce-lz4", "produce-zstd" ->
                produceConsume(scenario.substring("produce-".length()));
            case "idempotent" -> idempotent();
            case "group" -> group(false);
            case "group-consumer-protocol" -> group(true);
            case "admin" -> admin();
            case "alter-configs" -> alterConfigs();
            case "transactions" -> transactions();
            default -> throw new NotApplicable("not a scenario of this client");
        }
    }

    // ---------------------------------------------------------------------------------------
    // helpers

    private static Properties common() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return p;
    }

    private static void expect(boolean cond, String what) {
        if (!cond) throw new Failed(what);
    }

    private static void waitUntil(BooleanSupplier cond, String what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new Failed("timed out after " + WAIT_S + "s waiting for " + what);
            Thread.sleep(100);
        }
    }

    /** One record as sent or read: partition, key, value, headers. */
    record Rec(int partition, String key, String value, List<String> headers) {}

    private static List<Rec> records(int n, int partitions) {
        List<Rec> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(new Rec(i % partitions, "k" + i, ("value-" + i + "-").repeat(8),
                List.of("seq=" + i, "src=compat")));
        }
        return out;
    }

    private static void createTopic(Admin admin, String topic, int partitions, Map<String, String> configs)
            throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1).configs(configs)))
            .all().get(WAIT_S, TimeUnit.SECONDS);
    }

    private static void createTopic(String topic, int partitions) throws Exception {
        try (Admin admin = Admin.create(common())) {
            createTopic(admin, topic, partitions, Map.of());
        }
    }

    private static void produce(String topic, List<Rec> recs, Map<String, String> conf) throws Exception {
        Properties p = common();
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.putAll(conf);
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (Rec r : recs) {
                ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(topic, r.partition(),
                    bytes(r.key()), bytes(r.value()));
                for (String h : r.headers()) {
                    String[] kv = h.split("=", 2);
                    rec.headers().add(kv[0], bytes(kv[1]));
                }
                sent.add(producer.send(rec));
            }
            producer.flush();
            for (Future<RecordMetadata> f : sent) f.get(WAIT_S, TimeUnit.SECONDS);
        }
    }

    private static byte[] bytes(String s) { return s.getBytes(StandardCharsets.UTF_8); }

    private static String str(byte[] b) { return b == null ? null : new String(b, StandardCharsets.UTF_8); }

    private static Rec rec(ConsumerRecord<byte[], byte[]> r) {
        List<String> headers = new ArrayList<>();
        for (Header h : r.headers()) headers.add(h.key() + "=" + str(h.value()));
        return new Rec(r.partition(), str(r.key()), str(r.value()), headers);
    }

    private static KafkaConsumer<byte[], byte[]> consumer(Map<String, String> conf) {
        Properties p = common();
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.putAll(conf);
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    private static List<Rec> readAssigned(String topic, int partitions, int count, Map<String, String> conf) {
        List<Rec> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> c = consumer(conf)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (got.size() < count && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) got.add(rec(r));
            }
        }
        return got;
    }

    private static void checkRecords(List<Rec> sent, List<Rec> got) {
        Map<Integer, List<Rec>> want = sent.stream().collect(Collectors.groupingBy(Rec::partition));
        Map<Integer, List<Rec>> have = got.stream().collect(Collectors.groupingBy(Rec::partition));
        Set<Integer> parts = new HashSet<>(want.keySet());
        parts.addAll(have.keySet());
        for (int p : parts) {
            List<Rec> w = want.getOrDefault(p, List.of()), h = have.getOrDefault(p, List.of());
            expect(w.size() == h.size(), "partition " + p + ": sent " + w.size() + " records, read " + h.size());
            for (int i = 0; i < w.size(); i++) {
                expect(w.get(i).equals(h.get(i)), "partition " + p + " record " + i + ": sent " + w.get(i) + ", read " + h.get(i));
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // scenarios

    private static void produceConsume(String compression) throws Exception {
        String topic = prefix + "-t";
        createTopic(topic, 3);
        List<Rec> recs = records(300, 3);
        produce(topic, recs, Map.of(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression));
        checkRecords(recs, readAssigned(topic, 3, recs.size(), Map.of()));
    }

    private static void idempotent() throws Exception {
        String topic = prefix + "-t";
        createTopic(topic, 2);
        List<Rec> recs = records(2000, 2);
        produce(topic, recs, Map.of(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true",
            ProducerConfig.ACKS_CONFIG, "all", ProducerConfig.BATCH_SIZE_CONFIG, "4096",
            ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5"));
        checkRecords(recs, readAssigned(topic, 2, recs.size(), Map.of()));
    }

    /**
     * Two consumers share 4 partitions after a rebalance, read every record once and commit.
     * {@code kip848}: with {@code group.protocol=consumer} (the broker assigns; the session
     * and heartbeat settings are the broker's then, and the client refuses them).
     */
    private static void group(boolean kip848) throws Exception {
        String topic = prefix + "-t", gid = prefix + "-g";
        createTopic(topic, 4);
        List<Rec> recs = records(400, 4);
        produce(topic, recs, Map.of());
        Map<String, String> conf = kip848
            ? Map.of(ConsumerConfig.GROUP_ID_CONFIG, gid, "group.protocol", "consumer",
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10")
            : Map.of(ConsumerConfig.GROUP_ID_CONFIG, gid,
                ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000",
                ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        Set<String> seen = new HashSet<>();
        List<String> reads = new ArrayList<>();  // every record each poll returned
        try (KafkaConsumer<byte[], byte[]> a = consumer(conf); KafkaConsumer<byte[], byte[]> b = consumer(conf)) {
            a.subscribe(List.of(topic));
            waitUntil(() -> { poll(a, seen, reads); return a.assignment().size() == 4; },
                "the first consumer to be assigned all 4 partitions");
            b.subscribe(List.of(topic));
            waitUntil(() -> {
                poll(a, seen, reads);
                poll(b, seen, reads);
                Set<TopicPartition> pa = a.assignment(), pb = b.assignment();
                Set<TopicPartition> both = new HashSet<>(pa);
                both.retainAll(pb);
                return !pa.isEmpty() && !pb.isEmpty() && both.isEmpty() && pa.size() + pb.size() == 4;
            }, "a rebalance sharing 4 partitions between 2 consumers");
            waitUntil(() -> { poll(a, seen, reads); poll(b, seen, reads); return seen.size() == recs.size(); },
                "all " + recs.size() + " records through the group");
            a.commitSync();
            b.commitSync();
        }
        if (kip848) {
            // the broker hands a partition over only once its old owner revoked it (after our
            // commit), so no record is read twice
            expect(reads.size() == recs.size(), "read " + reads.size() + " records for "
                + recs.size() + " sent (" + (reads.size() - seen.size()) + " read twice)");
        }
        try (KafkaConsumer<byte[], byte[]> c = consumer(conf)) {
            Set<TopicPartition> tps = new HashSet<>();
            for (int p = 0; p < 4; p++) tps.add(new TopicPartition(topic, p));
            Map<TopicPartition, OffsetAndMetadata> committed = c.committed(tps, Duration.ofSeconds(WAIT_S));
            Map<Integer, Long> offsets = new HashMap<>();
            committed.forEach((tp, om) -> offsets.put(tp.partition(), om == null ? null : om.offset()));
            expect(offsets.equals(Map.of(0, 100L, 1, 100L, 2, 100L, 3, 100L)),
                "committed offsets " + offsets + ", want 100 each");
        }
    }

    private static void poll(KafkaConsumer<byte[], byte[]> c, Set<String> seen, List<String> reads) {
        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
            seen.add(r.partition() + "/" + str(r.key()));
            reads.add(r.partition() + "/" + str(r.key()));
        }
        try {
            c.commitSync(Duration.ofSeconds(WAIT_S));
        } catch (org.apache.kafka.clients.consumer.CommitFailedException
                 | org.apache.kafka.common.errors.RebalanceInProgressException e) {
            // a commit racing a rebalance may be refused; the next one covers it
        }
    }

    private static void admin() throws Exception {
        String topic = prefix + "-t";
        try (Admin admin = Admin.create(common())) {
            createTopic(admin, topic, 3, Map.of("retention.ms", "3600000"));
            expect(admin.listTopics().names().get(WAIT_S, TimeUnit.SECONDS).contains(topic), "created topic not listed");
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames()
                .get(WAIT_S, TimeUnit.SECONDS).get(topic);
            expect(d.partitions().size() == 3, "described " + d.partitions().size() + " partitions, want 3");
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config cfg = admin.describeConfigs(List.of(res)).all().get(WAIT_S, TimeUnit.SECONDS).get(res);
            ConfigEntry e = cfg.get("retention.ms");
            expect(e != null && "3600000".equals(e.value()), "retention.ms described as " + e);
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get(WAIT_S, TimeUnit.SECONDS);
            waitUntil(() -> {
                try {
                    return admin.describeTopics(List.of(topic)).allTopicNames().get(WAIT_S, TimeUnit.SECONDS)
                        .get(topic).partitions().size() == 5;
                } catch (Exception ex) {
                    throw new RuntimeException(ex);
                }
            }, "5 partitions after CreatePartitions");
            admin.deleteTopics(List.of(topic)).all().get(WAIT_S, TimeUnit.SECONDS);
            waitUntil(() -> {
                try {
                    return !admin.listTopics().names().get(WAIT_S, TimeUnit.SECONDS).contains(topic);
                } catch (Exception ex) {
                    throw new RuntimeException(ex);
                }
            }, "the deleted topic to disappear");
        }
    }

    private static void alterConfigs() throws Exception {
        String topic = prefix + "-t";
        try (Admin admin = Admin.create(common())) {
            createTopic(admin, topic, 1, Map.of());
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Map<ConfigResource, Collection<AlterConfigOp>> ops = Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "12345"), AlterConfigOp.OpType.SET)));
            admin.incrementalAlterConfigs(ops).all().get(WAIT_S, TimeUnit.SECONDS);
            Config cfg = admin.describeConfigs(List.of(res)).all().get(WAIT_S, TimeUnit.SECONDS).get(res);
            expect("12345".equals(cfg.get("retention.ms").value()), "retention.ms is " + cfg.get("retention.ms"));
        }
    }

    private static void transactions() throws Exception {
        String topic = prefix + "-t";
        createTopic(topic, 1);
        Properties p = common();
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, prefix + "-tx");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 10; i++) producer.send(new ProducerRecord<>(topic, 0, null, bytes("committed-" + i)));
            producer.commitTransaction();
            producer.beginTransaction();
            for (int i = 0; i < 5; i++) producer.send(new ProducerRecord<>(topic, 0, null, bytes("aborted-" + i)));
            producer.flush();
            producer.abortTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, bytes("committed-last")));
            producer.commitTransaction();
        }
        List<String> values = readAssigned(topic, 1, 11,
            Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))
            .stream().map(Rec::value).collect(Collectors.toList());
        List<String> want = new ArrayList<>();
        for (int i = 0; i < 10; i++) want.add("committed-" + i);
        want.add("committed-last");
        expect(values.equals(want), "read_committed consumer read " + values);
    }
}
