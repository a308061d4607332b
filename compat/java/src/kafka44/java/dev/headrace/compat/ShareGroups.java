package dev.headrace.compat;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

import static dev.headrace.compat.Suite.WAIT_S;
import static dev.headrace.compat.Suite.expect;

/**
 * Kafka 4.4's KafkaShareConsumer (KIP-932) in a share group on one partition of COUNT records
 * whose values are their numbers n, each consumer acknowledging explicitly: n % 10 == 3 is
 * RELEASEd at its first delivery, n % 10 == 7 REJECTed, every other record ACCEPTed.
 *
 * <p>share-group (one broker): a consumer in a process of its own takes records and is killed
 * (the JVM halts, neither acknowledging nor closing); then three consumers share the partition.
 * Every acknowledgement is answered ok; no record is lost; each is accepted once (a released
 * one after a delivery count of 2 or more), a rejected one never comes again, and what the
 * killed consumer held comes back.
 *
 * <p>cluster-share-leader-kill-9 (three broker processes, compat/broker.py KillableCluster):
 * the partition (RF=3) is consumed by three consumers while the harness kills its leader with
 * SIGKILL (HOOK kill-leader) and, 8 s later, starts it again (HOOK restart). No record whose
 * acceptance or rejection the broker confirmed is delivered again, and every record ends
 * accepted, or rejected if it was meant to be; one whose acknowledgement was refused at the
 * kill and that is not delivered again was written by the leader before it died, and the
 * group's start offset must end at the partition's end (every record done).
 */
final class ShareGroups {
    static final int COUNT = 1000;

    private ShareGroups() {}

    /** A record delivered to a consumer and what the consumer acknowledged it with. */
    record Got(int consumer, int n, int count, AcknowledgeType kind) {}

    /** The broker's answer to an acknowledgement of the record at {@code offset}. */
    record Settled(long offset, boolean ok) {}

    /** What the consumers saw, in the order they saw it. */
    static final class Events {
        private final List<Object> events = new ArrayList<>();
        private int deliveries;

        synchronized void add(Object event) {
            events.add(event);
            if (event instanceof Got) deliveries++;
        }

        synchronized int deliveries() { return deliveries; }

        synchronized List<Object> all() { return new ArrayList<>(events); }
    }

    /** What a scenario does while the consumers consume. */
    interface Meanwhile {
        void run(Events events) throws Exception;
    }

    static KafkaShareConsumer<String, String> consumer(String bootstrap, String group) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        p.put("max.poll.records", "50");
        return new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    /** share.auto.offset.reset=earliest for {@code group}: a group config (IncrementalAlterConfigs). */
    static void fromEarliest(Admin admin, String group) throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
        admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
            new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
            .all().get(WAIT_S, TimeUnit.SECONDS);
    }

    /** COUNT records, values 0..COUNT-1, in batches of ten (a share fetch hands out whole batches). */
    static void produceInTens(String topic, Map<String, String> conf) throws Exception {
        Properties p = Suite.common();
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5000");  // a batch is what one flush() sends
        p.putAll(conf);
        try (KafkaProducer<String, String> producer =
                 new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int n = 0; n < COUNT; n += 10) {
                for (int i = n; i < n + 10; i++) producer.send(new ProducerRecord<>(topic, 0, null, Integer.toString(i)));
                producer.flush();
            }
        }
    }

    /** How long consumers may take to get their first record (a loaded machine is slow). */
    private static final long FIRST_MS = 60_000;

    /**
     * {@code consumers} share consumers in {@code group}, each in a thread of its own, until
     * none got anything for {@code quietMs} (counted from the first delivery, and from the
     * end of {@code meanwhile}); {@code pauseMs} per record before it is acknowledged.
     * {@code meanwhile} runs on this thread while they consume.
     */
    static Events consume(String bootstrap, String topic, String group, int consumers, long quietMs,
                          long pauseMs, Meanwhile meanwhile) throws Exception {
        Events events = new Events();
        long start = System.currentTimeMillis();
        AtomicLong last = new AtomicLong(start);
        AtomicBoolean busy = new AtomicBoolean(true);  // meanwhile has not returned
        AtomicBoolean stop = new AtomicBoolean();
        BooleanSupplier goOn = () -> {
            long now = System.currentTimeMillis();
            if (stop.get()) return false;
            if (events.deliveries() == 0) return now - start < FIRST_MS;
            return busy.get() || now - last.get() < quietMs;
        };
        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < consumers; i++) {
            final int id = i;
            Thread t = new Thread(() -> {
                try (KafkaShareConsumer<String, String> c = consumer(bootstrap, group)) {
                    c.setAcknowledgementCommitCallback((offsets, error) -> {
                        for (Set<Long> set : offsets.values()) {
                            for (long o : set) events.add(new Settled(o, error == null));
                        }
                    });
                    c.subscribe(List.of(topic));
                    while (goOn.getAsBoolean()) {
                        ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                        for (ConsumerRecord<String, String> r : records) {
                            int n = Integer.parseInt(r.value());
                            short count = r.deliveryCount().orElse((short) -1);
                            AcknowledgeType kind = AcknowledgeType.ACCEPT;
                            if (n % 10 == 7) kind = AcknowledgeType.REJECT;
                            else if (n % 10 == 3 && count == 1) kind = AcknowledgeType.RELEASE;
                            if (pauseMs > 0) Thread.sleep(pauseMs);
                            c.acknowledge(r, kind);
                            events.add(new Got(id, n, count, kind));
                        }
                        if (records.count() > 0) {
                            try {
                                c.commitSync();
                            } catch (RuntimeException e) {  // e.g. the leader just died
                                System.out.println("consumer " + id + ": commitSync: " + e);
                            }
                            last.set(System.currentTimeMillis());
                        }
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            }, "share-consumer-" + i);
            threads.add(t);
            t.start();
        }
        try {
            meanwhile.run(events);
            last.set(System.currentTimeMillis());
        } catch (Exception e) {
            stop.set(true);
            throw e;
        } finally {
            busy.set(false);
            for (Thread t : threads) t.join(TimeUnit.SECONDS.toMillis(120));
        }
        for (Thread t : threads) expect(!t.isAlive(), t.getName() + " still consuming after 120 s");
        if (failure.get() != null) throw new Suite.Failed("a share consumer failed: " + failure.get());
        return events;
    }

    // ---------------------------------------------------------------------------------------

    static void shareGroup(String bootstrap, String prefix) throws Exception {
        String topic = prefix + "-t", group = prefix + "-g";
        try (Admin admin = Admin.create(Suite.common())) {
            Suite.createTopic(admin, topic, 1, Map.of());
            fromEarliest(admin, group);
        }
        produceInTens(topic, Map.of());
        int holding = killedWhileHolding(bootstrap, topic, group);
        System.out.println("the killed consumer held " + holding + " records");
        Events events = consume(bootstrap, topic, group, 3, 5000, 2, e -> {});

        Map<Integer, List<Got>> deliveries = new TreeMap<>();
        Map<Long, List<Boolean>> settled = new TreeMap<>();
        Set<Integer> consumers = new HashSet<>();
        for (Object e : events.all()) {
            if (e instanceof Got g) {
                deliveries.computeIfAbsent(g.n(), k -> new ArrayList<>()).add(g);
                consumers.add(g.consumer());
            } else if (e instanceof Settled s) {
                settled.computeIfAbsent(s.offset(), k -> new ArrayList<>()).add(s.ok());
            }
        }
        System.out.println(events.deliveries() + " deliveries of " + deliveries.size() + " records to "
            + consumers.size() + " consumers; " + settled.size() + " offsets settled");
        // every acknowledgement was answered, and answered ok
        expect(settled.size() == COUNT && settled.keySet().stream().allMatch(o -> o >= 0 && o < COUNT),
            "acknowledgements answered for " + settled.size() + " offsets, want " + COUNT);
        settled.forEach((o, answers) -> expect(!answers.contains(false), "offset " + o + ": an acknowledgement failed"));
        expect(deliveries.size() == COUNT && deliveries.keySet().stream().allMatch(n -> n >= 0 && n < COUNT),
            "delivered " + deliveries.size() + " of records 0.." + (COUNT - 1));
        int again = 0;
        for (Map.Entry<Integer, List<Got>> e : deliveries.entrySet()) {
            int n = e.getKey();
            List<Got> got = e.getValue();
            List<AcknowledgeType> kinds = got.stream().map(Got::kind).toList();
            if (n % 10 == 7) {
                expect(kinds.equals(List.of(AcknowledgeType.REJECT)), "rejected " + n + " came again: " + got);
            } else if (n % 10 == 3) {
                long accepted = kinds.stream().filter(k -> k == AcknowledgeType.ACCEPT).count();
                expect(accepted == 1 && kinds.get(kinds.size() - 1) == AcknowledgeType.ACCEPT,
                    "released " + n + ": " + got);
                expect(got.get(got.size() - 1).count() >= 2, "released " + n + " redelivered with count " + got);
            } else {
                expect(kinds.equals(List.of(AcknowledgeType.ACCEPT)), "record " + n + " accepted more than once: " + got);
            }
            if (n % 10 != 3 && got.get(0).count() >= 2) again++;
        }
        // what the killed consumer held came back (the released ones of it do not count)
        expect(again >= holding - holding / 10 - 1, again + " records delivered a second time, the killed "
            + "consumer held " + holding);
        expect(consumers.size() >= 2, "only " + consumers + " of three consumers got records");
    }

    /**
     * A share consumer in a JVM of its own polls until it holds records, then the JVM halts
     * (neither acknowledging nor closing: a consumer killed while it holds records). Returns
     * how many it held.
     */
    static int killedWhileHolding(String bootstrap, String topic, String group) throws Exception {
        String java = ProcessHandle.current().info().command().orElse("java");
        Process p = new ProcessBuilder(java, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp",
            System.getProperty("java.class.path"), ShareGroups.class.getName(), "hold", bootstrap, topic, group)
            .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        String holding = null;
        try (BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
            for (String line; (line = out.readLine()) != null; ) {
                System.out.println("[holder] " + line);
                if (line.startsWith("holding ")) holding = line;
            }
        }
        expect(p.waitFor(60, TimeUnit.SECONDS), "the holding consumer did not stop");
        expect(holding != null, "the holding consumer got nothing (exit " + p.exitValue() + ")");
        return Integer.parseInt(holding.split(" ")[1]);
    }

    /** {@code ShareGroups hold BOOTSTRAP TOPIC GROUP}: see {@link #killedWhileHolding}. */
    public static void main(String[] args) {
        KafkaShareConsumer<String, String> c = consumer(args[1], args[3]);
        c.subscribe(List.of(args[2]));
        long until = System.currentTimeMillis() + 60_000;
        while (System.currentTimeMillis() < until) {
            ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(500));
            if (records.count() > 0) {
                System.out.println("holding " + records.count());
                System.out.flush();
                Runtime.getRuntime().halt(0);
            }
        }
        System.out.println("nothing to hold");
        System.out.flush();
        Runtime.getRuntime().halt(1);
    }

    // ---------------------------------------------------------------------------------------

    static void leaderKill9(String bootstrap, String prefix) throws Exception {
        String topic = prefix + "-t", group = prefix + "-g";
        int leader;
        try (Admin admin = Admin.create(Suite.common())) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 3))).all().get(WAIT_S, TimeUnit.SECONDS);
            Suite.waitUntil(() -> {
                try {
                    return Suite.partition0(admin, topic).isr().size() == 3;
                } catch (Exception e) {
                    return false;
                }
            }, "three replicas in sync");
            leader = Suite.partition0(admin, topic).leader().id();
            fromEarliest(admin, group);
        }
        System.out.println("leader of " + topic + "-0: broker " + leader);
        produceInTens(topic, Map.of(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true", ProducerConfig.ACKS_CONFIG, "all"));
        BufferedReader harness = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Events events = consume(bootstrap, topic, group, 3, 10_000, 20, running -> {
            Suite.waitUntil(() -> running.deliveries() >= 150, "150 deliveries before the kill", 60);
            System.out.println(running.deliveries() + " deliveries; HOOK kill-leader");
            String killed = ask(harness, "kill-leader " + topic + " 0");
            expect(killed != null && killed.startsWith("killed "), "the harness answered " + killed);
            Thread.sleep(8000);
            String node = killed.split(" ")[1];
            String restarted = ask(harness, "restart " + node);
            expect(restarted != null && restarted.startsWith("restarted "), "the harness answered " + restarted);
        });

        // in the order seen: a delivery after the broker confirmed the record's ACCEPT or REJECT
        // is a violation
        Map<Integer, List<Got>> deliveries = new TreeMap<>();
        Map<Integer, AcknowledgeType> sent = new HashMap<>();  // n -> the kind last sent for it
        Map<Integer, AcknowledgeType> confirmed = new HashMap<>();
        // records whose last acknowledgement failed (the leader died: applied or not, the
        // consumer cannot tell) and that were not delivered again since
        Set<Integer> unknown = new HashSet<>();
        List<Got> violations = new ArrayList<>();
        int refused = 0;
        for (Object e : events.all()) {
            if (e instanceof Got g) {
                AcknowledgeType done = confirmed.get(g.n());
                if (done == AcknowledgeType.ACCEPT || done == AcknowledgeType.REJECT) violations.add(g);
                deliveries.computeIfAbsent(g.n(), k -> new ArrayList<>()).add(g);
                sent.put(g.n(), g.kind());
                unknown.remove(g.n());
            } else if (e instanceof Settled s) {
                int n = (int) s.offset();
                if (!s.ok()) {
                    refused++;
                    if (sent.containsKey(n) && !confirmed.containsKey(n)) unknown.add(n);
                } else if (sent.containsKey(n)) {
                    confirmed.put(n, sent.get(n));
                    unknown.remove(n);
                }
            }
        }
        System.out.println("deliveries beyond the planned ones: " + (events.deliveries() - COUNT - COUNT / 10)
            + "; acknowledgements refused: " + refused + "; refused and never delivered again: " + unknown.size());
        expect(violations.isEmpty(), violations.size() + " deliveries after a confirmed ACCEPT or REJECT: "
            + violations.subList(0, Math.min(5, violations.size())));
        expect(deliveries.size() == COUNT && deliveries.keySet().stream().allMatch(n -> n >= 0 && n < COUNT),
            "delivered " + deliveries.size() + " of records 0.." + (COUNT - 1));
        for (int n = 0; n < COUNT; n++) {
            AcknowledgeType want = n % 10 == 7 ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
            if (confirmed.get(n) == null && unknown.contains(n)) continue;  // checked below
            expect(confirmed.get(n) == want, "record " + n + " confirmed " + confirmed.get(n) + ", want " + want
                + ": " + deliveries.get(n));
        }
        // An acknowledgement the leader wrote before it died but never answered is done: the
        // new leader does not deliver its record again. The start offset passes a record
        // only once it is done: it must end at the end of the partition (every record done).
        try (Admin admin = Admin.create(Suite.common())) {
            var offsets = admin.listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
                .partitionsToOffsetInfo(group).get(WAIT_S, TimeUnit.SECONDS);
            var info = offsets.get(new TopicPartition(topic, 0));
            expect(info != null && info.startOffset() == COUNT,
                "the group's start offset is " + (info == null ? null : info.startOffset()) + ", want " + COUNT);
        }
    }

    /** Prints {@code HOOK words} and returns the harness's answer (compat/runner.py). */
    private static String ask(BufferedReader harness, String words) throws Exception {
        System.out.println("HOOK " + words);
        System.out.flush();
        String answer = harness.readLine();
        System.out.println("harness: " + answer);
        return answer;
    }
}
