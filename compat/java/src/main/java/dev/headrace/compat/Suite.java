package dev.headrace.compat;

import java.io.BufferedReader;
import java.io.FileReader;
import java.io.InputStreamReader;
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
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The standard compatibility scenarios for the Java client (see compat/kit.py for the
 * convention): {@code Suite BOOTSTRAP SCENARIO PREFIX} prints {@code RESULT pass},
 * {@code RESULT n/a WHY} or {@code RESULT fail REASON} as its last line.
 */
public final class Suite {
    static final long WAIT_S = 30;
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
            case "cluster-produce-consume" -> clusterProduceConsume();
            case "cluster-group" -> clusterGroup();
            case "cluster-transactions" -> clusterTransactions();
            case "cluster-leader-kill-9" -> leaderKill9();
            case "security-ssl" -> over("ssl");
            case "security-mtls" -> over("mtls");
            case "security-sasl-ssl-scram-sha-512" -> over("sasl_ssl");
            case "security-sasl-plaintext-plain" -> over("sasl_plaintext");
            case "security-wrong-password" -> wrongPassword();
            // Kafka 4.4's share consumer (KIP-932) and Kafka Streams with group.protocol=streams
            // (KIP-1071): src/kafka44, compiled only into the kafka-clients 4.4 build
            case "share-group", "cluster-share-leader-kill-9", "streams-at-least-once",
                 "streams-exactly-once-v2", "streams-classic-protocol" -> kafka44(scenario);
            // a name this program does not know is a failure (a typo, or a scenario not written
            // yet), never n/a: n/a is only what a scenario declares it cannot do
            default -> throw new Failed("unknown scenario " + scenario);
        }
    }

    /** The class that runs the scenarios of src/kafka44, where this build has it. */
    static final String KAFKA44 = "dev.headrace.compat.Kafka44";

    /**
     * Runs a scenario of src/kafka44 (the kafka44 Maven profile adds that folder); a build for
     * an older kafka-clients has no such class, and its client no way to run the scenario.
     */
    private static void kafka44(String scenario) throws Exception {
        Class<?> scenarios;
        try {
            scenarios = Class.forName(KAFKA44);
        } catch (ClassNotFoundException e) {
            String version = clientVersion();
            throw new NotApplicable(scenario.startsWith("streams-")
                ? "kafka-clients " + version + " has no streams groups (no StreamsGroupHeartbeat, "
                    + "KIP-1071)"
                : "kafka-clients " + version + "'s KafkaShareConsumer is KIP-932's early access: "
                    + "ShareFetch v0, an unstable version; Kafka 4.4 and Headrace serve v1-2");
        }
        try {
            scenarios.getMethod("run", String.class, String.class, String.class)
                .invoke(null, scenario, bootstrap, prefix);
        } catch (java.lang.reflect.InvocationTargetException e) {
            if (e.getCause() instanceof Exception cause) throw cause;
            throw e;
        }
    }

    /** The kafka-clients version, as its jar states it (kafka/kafka-version.properties). */
    static String clientVersion() {
        Properties p = new Properties();
        try (java.io.InputStream in = KafkaProducer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in != null) p.load(in);
        } catch (java.io.IOException e) {
            // unknown, said below
        }
        return p.getProperty("version", "(unknown version)");
    }

    // ---------------------------------------------------------------------------------------
    // helpers

    static Properties common() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return p;
    }

    static void expect(boolean cond, String what) {
        if (!cond) throw new Failed(what);
    }

    static void waitUntil(BooleanSupplier cond, String what) throws InterruptedException {
        waitUntil(cond, what, WAIT_S);
    }

    static void waitUntil(BooleanSupplier cond, String what, long seconds) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new Failed("timed out after " + seconds + "s waiting for " + what);
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

    static void createTopic(Admin admin, String topic, int partitions, Map<String, String> configs)
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

    static byte[] bytes(String s) { return s.getBytes(StandardCharsets.UTF_8); }

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
            a.subscribe(List.of(topic), commitOnRevoke(a));
            waitUntil(() -> { poll(a, seen, reads); return a.assignment().size() == 4; },
                "the first consumer to be assigned all 4 partitions");
            b.subscribe(List.of(topic), commitOnRevoke(b));
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
            // the broker hands a partition over only once its old owner revoked it (after the
            // commit in onPartitionsRevoked), so no record is read twice
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

    /**
     * Commits what the consumer has read before it gives partitions up. A listener also makes
     * the revocation wait for the application thread: without one, kafka-clients before the fix
     * of KAFKA-20332 can complete a revocation in the background while a poll's records of that
     * partition are still to be returned (and committed), so they are read twice on any broker.
     */
    private static ConsumerRebalanceListener commitOnRevoke(KafkaConsumer<byte[], byte[]> c) {
        return new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                if (!partitions.isEmpty()) c.commitSync(Duration.ofSeconds(WAIT_S));
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            }
        };
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

    // ---------------------------------------------------------------------------------------
    // against a cluster of three brokers: a topic of 12 partitions is spread over all of them
    // (placement's bounded load lets no broker hold more than 5), so every scenario below talks
    // to each broker, and its coordinator is another broker than most partition leaders

    private static final int SPREAD = 12;

    /** partition -> leader id of {@code topic}, from Metadata. */
    private static Map<Integer, Integer> leaders(Admin admin, String topic) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames()
            .get(WAIT_S, TimeUnit.SECONDS).get(topic);
        Map<Integer, Integer> out = new HashMap<>();
        for (TopicPartitionInfo p : d.partitions()) out.put(p.partition(), p.leader() == null ? -1 : p.leader().id());
        return out;
    }

    /** The cluster's node ids; there must be three. */
    private static Set<Integer> nodes(Admin admin) throws Exception {
        Set<Integer> ids = new HashSet<>();
        for (Node n : admin.describeCluster().nodes().get(WAIT_S, TimeUnit.SECONDS)) ids.add(n.id());
        expect(ids.size() == 3, "describeCluster lists " + ids + ", want three brokers");
        return ids;
    }

    /** Creates {@code topic} with 12 partitions; checks that their leaders are all three brokers. */
    private static Map<Integer, Integer> createSpread(Admin admin, String topic) throws Exception {
        Set<Integer> ids = nodes(admin);
        createTopic(admin, topic, SPREAD, Map.of());
        Map<Integer, Integer> leaders = new HashMap<>();
        waitUntil(() -> {
            try {
                leaders.clear();
                leaders.putAll(leaders(admin, topic));
                return leaders.size() == SPREAD && !leaders.containsValue(-1);
            } catch (Exception e) {
                return false;
            }
        }, "a leader for each of the " + SPREAD + " partitions");
        expect(new HashSet<>(leaders.values()).equals(ids), "leaders " + leaders + " are not all of " + ids);
        System.out.println("partition leaders of " + topic + ": " + leaders);
        return leaders;
    }

    /** The leader of partition abs(hash(key)) % n of the internal {@code topic}: the coordinator of key. */
    private static int coordinatorByHash(Admin admin, String internal, String key) throws Exception {
        Map<Integer, Integer> leaders = leaders(admin, internal);
        int h = key.hashCode();
        int partition = (h == Integer.MIN_VALUE ? 0 : Math.abs(h)) % leaders.size();
        return leaders.get(partition);
    }

    private static void clusterProduceConsume() throws Exception {
        String topic = prefix + "-t";
        try (Admin admin = Admin.create(common())) {
            createSpread(admin, topic);
        }
        List<Rec> recs = records(1200, SPREAD);
        produce(topic, recs, Map.of(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true",
            ProducerConfig.ACKS_CONFIG, "all", ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4"));
        checkRecords(recs, readAssigned(topic, SPREAD, recs.size(), Map.of()));
        try (KafkaConsumer<byte[], byte[]> c = consumer(Map.of())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < SPREAD; p++) tps.add(new TopicPartition(topic, p));
            Map<TopicPartition, Long> ends = c.endOffsets(tps, Duration.ofSeconds(WAIT_S));
            for (TopicPartition tp : tps) {
                expect(ends.get(tp) == 100L, "end offset of " + tp + " is " + ends.get(tp) + ", want 100");
            }
        }
    }

    /**
     * Two consumers of one group share 12 partitions led by three brokers and commit; the group's
     * coordinator (the leader of its partition of __consumer_offsets) is one broker, so most
     * partitions are led by others. Then the committed offsets, read back through the admin client.
     */
    private static void clusterGroup() throws Exception {
        String topic = prefix + "-t", gid = prefix + "-g";
        Map<Integer, Integer> leaders;
        try (Admin admin = Admin.create(common())) {
            leaders = createSpread(admin, topic);
        }
        List<Rec> recs = records(1200, SPREAD);
        produce(topic, recs, Map.of());
        Map<String, String> conf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, gid,
            ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000",
            ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        Set<String> seen = new HashSet<>();
        List<String> reads = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> a = consumer(conf); KafkaConsumer<byte[], byte[]> b = consumer(conf)) {
            a.subscribe(List.of(topic), commitOnRevoke(a));
            b.subscribe(List.of(topic), commitOnRevoke(b));
            waitUntil(() -> {
                poll(a, seen, reads);
                poll(b, seen, reads);
                Set<TopicPartition> pa = a.assignment(), pb = b.assignment();
                Set<TopicPartition> both = new HashSet<>(pa);
                both.retainAll(pb);
                return !pa.isEmpty() && !pb.isEmpty() && both.isEmpty() && pa.size() + pb.size() == SPREAD;
            }, "two consumers sharing the " + SPREAD + " partitions");
            waitUntil(() -> { poll(a, seen, reads); poll(b, seen, reads); return seen.size() == recs.size(); },
                "all " + recs.size() + " records through the group");
            a.commitSync();
            b.commitSync();
            try (Admin admin = Admin.create(common())) {
                ConsumerGroupDescription g = admin.describeConsumerGroups(List.of(gid)).all()
                    .get(WAIT_S, TimeUnit.SECONDS).get(gid);
                int coordinator = g.coordinator().id();
                expect(g.members().size() == 2, "the group has " + g.members().size() + " members, want 2");
                int want = coordinatorByHash(admin, "__consumer_offsets", gid);
                expect(coordinator == want, "the group's coordinator is broker " + coordinator
                    + ", but its partition of __consumer_offsets is led by " + want);
                System.out.println("group coordinator: broker " + coordinator);
                long elsewhere = leaders.values().stream().filter(l -> l != coordinator).count();
                expect(elsewhere >= SPREAD - 5, "only " + elsewhere + " partitions led by brokers other than"
                    + " the coordinator " + coordinator + ": " + leaders);
                Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(gid)
                    .partitionsToOffsetAndMetadata().get(WAIT_S, TimeUnit.SECONDS);
                Map<Integer, Long> got = new HashMap<>();
                offsets.forEach((tp, om) -> got.put(tp.partition(), om == null ? null : om.offset()));
                Map<Integer, Long> wantOffsets = new HashMap<>();
                for (int p = 0; p < SPREAD; p++) wantOffsets.put(p, 100L);
                expect(got.equals(wantOffsets), "committed offsets " + got + ", want 100 each");
            }
        }
    }

    /**
     * A transaction writes to 12 partitions on three brokers and commits offsets of a group;
     * while it is open, DescribeTransactions shows its coordinator (the leader of its partition of
     * __transaction_state) and its partitions. Committed, aborted, committed again: a
     * read_committed consumer reads only the committed records of every partition, a
     * read_uncommitted one all of them, and the group's offsets count.
     */
    private static void clusterTransactions() throws Exception {
        String topic = prefix + "-t", gid = prefix + "-g", txnId = prefix + "-tx";
        Map<Integer, Integer> leaders;
        try (Admin admin = Admin.create(common())) {
            leaders = createSpread(admin, topic);
        }
        Properties p = common();
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
             Admin admin = Admin.create(common())) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < SPREAD; i++) producer.send(new ProducerRecord<>(topic, i, null, bytes("committed-" + i)));
            producer.flush();
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (int i = 0; i < SPREAD; i++) offsets.put(new TopicPartition(topic, i), new OffsetAndMetadata(1));
            producer.sendOffsetsToTransaction(offsets, new ConsumerGroupMetadata(gid));
            TransactionDescription d = admin.describeTransactions(List.of(txnId)).all()
                .get(WAIT_S, TimeUnit.SECONDS).get(txnId);
            expect(d.state() == TransactionState.ONGOING, "transaction state " + d.state() + ", want Ongoing");
            int want = coordinatorByHash(admin, "__transaction_state", txnId);
            expect(d.coordinatorId() == want, "the transaction's coordinator is broker " + d.coordinatorId()
                + ", but its partition of __transaction_state is led by " + want);
            Set<Integer> spanned = new HashSet<>();
            for (TopicPartition tp : d.topicPartitions()) {
                if (tp.topic().equals(topic)) spanned.add(leaders.get(tp.partition()));
            }
            System.out.println("transaction coordinator: broker " + d.coordinatorId() + "; partitions "
                + d.topicPartitions());
            expect(spanned.size() == 3, "the open transaction's partitions are led by " + spanned
                + " (" + d.topicPartitions() + "), want three brokers");
            producer.commitTransaction();
            producer.beginTransaction();
            for (int i = 0; i < SPREAD; i++) producer.send(new ProducerRecord<>(topic, i, null, bytes("aborted-" + i)));
            producer.flush();
            producer.abortTransaction();
            producer.beginTransaction();
            for (int i = 0; i < SPREAD; i++) producer.send(new ProducerRecord<>(topic, i, null, bytes("last-" + i)));
            producer.commitTransaction();
            Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(gid)
                .partitionsToOffsetAndMetadata().get(WAIT_S, TimeUnit.SECONDS);
            expect(committed.size() == SPREAD && committed.values().stream().allMatch(om -> om.offset() == 1),
                "the group's offsets after the commit: " + committed);
        }
        List<Rec> got = readAssigned(topic, SPREAD, 2 * SPREAD,
            Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"));
        Map<Integer, List<String>> byPartition = new HashMap<>();
        for (Rec r : got) byPartition.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.value());
        for (int i = 0; i < SPREAD; i++) {
            List<String> w = List.of("committed-" + i, "last-" + i);
            expect(w.equals(byPartition.get(i)), "read_committed read " + byPartition.get(i)
                + " from partition " + i + " (led by broker " + leaders.get(i) + "), want " + w);
        }
        int all = readAssigned(topic, SPREAD, 3 * SPREAD, Map.of()).size();
        expect(all == 3 * SPREAD, "read_uncommitted read " + all + " records, want " + 3 * SPREAD);
    }

    // ---------------------------------------------------------------------------------------
    // against a broker with a listener of each security protocol (compat/broker.py,
    // SecureBroker; its addresses, PEM files and users in the properties file that
    // HEADRACE_COMPAT_SECURITY names)

    private static Properties security() throws Exception {
        String path = System.getenv("HEADRACE_COMPAT_SECURITY");
        if (path == null) throw new Failed("HEADRACE_COMPAT_SECURITY is not set: not run against the suite's secure broker");
        Properties p = new Properties();
        try (FileReader r = new FileReader(path, StandardCharsets.UTF_8)) {
            p.load(r);
        }
        return p;
    }

    /** The client settings for one listener: a PEM truststore (Kafka clients 2.7+), a PEM keystore for mTLS. */
    private static Map<String, String> secured(String listener) throws Exception {
        Properties sec = security();
        Map<String, String> conf = new HashMap<>();
        conf.put("bootstrap.servers", sec.getProperty(listener));
        if (!listener.equals("sasl_plaintext")) {
            conf.put("ssl.truststore.type", "PEM");
            conf.put("ssl.truststore.location", sec.getProperty("ca.pem"));
        }
        switch (listener) {
            case "ssl" -> conf.put("security.protocol", "SSL");
            case "mtls" -> {
                conf.put("security.protocol", "SSL");
                conf.put("ssl.keystore.type", "PEM");
                conf.put("ssl.keystore.location", sec.getProperty("client.keystore.pem"));
            }
            case "sasl_ssl" -> {
                conf.put("security.protocol", "SASL_SSL");
                conf.put("sasl.mechanism", sec.getProperty("scram.mechanism"));
                conf.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required"
                    + " username=\"" + sec.getProperty("scram.username") + "\" password=\""
                    + sec.getProperty("scram.password") + "\";");
            }
            default -> {
                conf.put("security.protocol", "SASL_PLAINTEXT");
                conf.put("sasl.mechanism", "PLAIN");
                conf.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required"
                    + " username=\"" + sec.getProperty("plain.username") + "\" password=\""
                    + sec.getProperty("plain.password") + "\";");
            }
        }
        return conf;
    }

    /** A topic created, 300 records produced (idempotent, acks=all) and read back, all through one secured listener. */
    private static void over(String listener) throws Exception {
        Map<String, String> conf = secured(listener);
        String topic = prefix + "-t";
        Properties ap = common();
        ap.putAll(conf);
        try (Admin admin = Admin.create(ap)) {
            createTopic(admin, topic, 3, Map.of());
        }
        List<Rec> recs = records(300, 3);
        Map<String, String> pc = new HashMap<>(conf);
        pc.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pc.put(ProducerConfig.ACKS_CONFIG, "all");
        produce(topic, recs, pc);
        checkRecords(recs, readAssigned(topic, 3, recs.size(), conf));
    }

    /** SCRAM-SHA-512 over SASL_SSL with a wrong password: an authentication error, soon (no hang). */
    private static void wrongPassword() throws Exception {
        Map<String, String> conf = secured("sasl_ssl");
        conf.put("sasl.jaas.config", conf.get("sasl.jaas.config").replaceAll("password=\"[^\"]*\"",
            "password=\"not-the-password\""));
        Properties p = common();
        p.putAll(conf);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        long t0 = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.partitionsFor(prefix + "-t");
            throw new Failed("metadata was served with a wrong password");
        } catch (AuthenticationException e) {
            System.out.printf("refused after %.1fs: %s%n", (System.nanoTime() - t0) / 1e9, e);
        }
    }

    // ---------------------------------------------------------------------------------------
    // against three separate broker processes (compat/broker.py, KillableCluster)

    /** Leader and ISR of partition 0 of {@code topic}. */
    static TopicPartitionInfo partition0(Admin admin, String topic) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get(WAIT_S, TimeUnit.SECONDS)
            .get(topic).partitions().get(0);
    }

    /**
     * An idempotent acks=all producer writes to a partition of an RF=3 topic
     * (min.insync.replicas=2); once half is acknowledged the harness kills the partition's
     * leader with SIGKILL (HOOK kill-leader) while records are still in flight, and the
     * producer carries on against the new leader. Every acknowledged record must be read back
     * once, in the order sent; no record may fail.
     */
    private static void leaderKill9() throws Exception {
        String topic = prefix + "-t";
        int leader;
        try (Admin admin = Admin.create(common())) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 3)
                .configs(Map.of("min.insync.replicas", "2")))).all().get(WAIT_S, TimeUnit.SECONDS);
            waitUntil(() -> {
                try {
                    return partition0(admin, topic).isr().size() == 3;
                } catch (Exception e) {
                    return false;
                }
            }, "three replicas in sync");
            leader = partition0(admin, topic).leader().id();
        }
        System.out.println("leader of " + topic + "-0: broker " + leader);
        Properties p = common();
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "2");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "60000");
        List<Integer> acked = java.util.Collections.synchronizedList(new ArrayList<>());
        List<String> failed = java.util.Collections.synchronizedList(new ArrayList<>());
        AtomicReference<String> answer = new AtomicReference<>();
        int n = 0, killedAt;
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (; n < 1000; n++) send(producer, topic, n, acked, failed);
            producer.flush();
            expect(acked.size() == 1000 && failed.isEmpty(), "the first half: " + acked.size()
                + " acknowledged, failures " + failed);
            Thread reader = new Thread(() -> {
                try {
                    answer.set(new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine());
                } catch (Exception e) {
                    answer.set("error " + e);
                }
            });
            reader.setDaemon(true);
            reader.start();
            boolean asked = false;
            while (reader.isAlive() && n < 200_000) {  // in flight while the leader dies
                for (int i = 0; i < 10; i++, n++) send(producer, topic, n, acked, failed);
                if (!asked && n >= 1100) {  // 100 records handed to the producer, not waited for
                    System.out.println(acked.size() + " acknowledged of " + n + " sent; HOOK kill-leader");
                    System.out.println("HOOK kill-leader " + topic + " 0");
                    System.out.flush();
                    asked = true;
                }
                Thread.sleep(5);
            }
            reader.join(TimeUnit.SECONDS.toMillis(WAIT_S));
            expect(answer.get() != null && answer.get().startsWith("killed"), "the harness answered " + answer.get());
            killedAt = n;
            for (int i = 0; i < 1000; i++, n++) send(producer, topic, n, acked, failed);  // the new leader's
            producer.flush();
        }
        expect(failed.isEmpty(), failed.size() + " records failed: " + failed.subList(0, Math.min(3, failed.size())));
        expect(acked.size() == n, acked.size() + " acknowledged of " + n);
        int newLeader;
        List<Integer> isr;
        try (Admin admin = Admin.create(common())) {
            TopicPartitionInfo info = partition0(admin, topic);
            newLeader = info.leader() == null ? -1 : info.leader().id();
            isr = info.isr().stream().map(Node::id).collect(Collectors.toList());
        }
        System.out.println(answer.get() + "; " + (killedAt - 1000) + " records sent after the first 1000 until the kill was answered, "
            + n + " in all; new leader " + newLeader + ", ISR " + isr);
        expect(newLeader != leader && newLeader != -1, "leader " + newLeader + " after the kill of " + leader);
        long high;
        try (KafkaConsumer<byte[], byte[]> c = consumer(Map.of())) {
            TopicPartition tp = new TopicPartition(topic, 0);
            high = c.endOffsets(List.of(tp), Duration.ofSeconds(WAIT_S)).get(tp);
        }
        expect(high >= n, "end offset " + high + " for " + n + " acknowledged records");
        List<Rec> got = readAssigned(topic, 1, (int) high, Map.of());
        Set<String> distinct = new HashSet<>();
        for (Rec r : got) distinct.add(r.value());
        expect(distinct.size() == got.size(), (got.size() - distinct.size()) + " records read twice");
        expect(got.size() == n, "read " + got.size() + " records, want " + n);
        for (int i = 0; i < n; i++) {
            expect(got.get(i).value().equals(Integer.toString(i)), "record " + i + " read as " + got.get(i).value());
        }
    }

    private static void send(KafkaProducer<byte[], byte[]> producer, String topic, int i,
                             List<Integer> acked, List<String> failed) {
        producer.send(new ProducerRecord<>(topic, 0, null, bytes(Integer.toString(i))), (md, e) -> {
            if (e != null) failed.add(e.toString());
            else acked.add(i);
        });
    }
}
