package dev.headrace.compat;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.CloseOptions.GroupMembershipOperation;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Produced;

import static dev.headrace.compat.Suite.WAIT_S;
import static dev.headrace.compat.Suite.expect;

/**
 * Kafka Streams 4.4's word count: lines from a topic of 4 partitions are split into words,
 * repartitioned by word and counted in a state store with a changelog; (word, count) goes to
 * an output topic. With group.protocol=streams (KIP-1071) the broker assigns the tasks and
 * creates the repartition and changelog topics; with classic, Streams does both itself.
 *
 * <p>Two instances (two KafkaStreams in this JVM, each with its own state directory and two
 * stream threads): the first counts 300 lines alone and holds all 8 tasks; the second joins
 * and 300 more lines come while the tasks spread over both, disjoint; the first closes
 * (leaving the group) and 300 more come while the second takes every task. After each step the
 * latest count of each word in the output topic (read_committed) must be exact: at least once
 * too, as every handover here is graceful (a task's offsets are committed before it is revoked
 * or closed); at least once counts twice only after a crash.
 */
final class StreamsWordCount {
    private static final String[] WORDS = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta",
        "theta", "iota", "kappa"};
    private static final Set<String> ALL_TASKS = Set.of("0_0", "0_1", "0_2", "0_3", "1_0", "1_1", "1_2", "1_3");
    private static final long STEP_S = 90;  // the longest one step may take

    private static final long T0 = System.nanoTime();

    private StreamsWordCount() {}

    /** A line of the scenario's log, with the seconds since it began. */
    static void say(String what) {
        System.out.printf("[%5.1fs] %s%n", (System.nanoTime() - T0) / 1e9, what);
    }

    /** One Kafka Streams instance running the word count. */
    static final class Instance {
        final String name;
        final KafkaStreams streams;
        final List<String> errors = Collections.synchronizedList(new ArrayList<>());

        Instance(String name, String bootstrap, String app, String guarantee, String protocol, Path stateDir,
                 String input, String output) {
            this.name = name;
            Properties p = new Properties();
            p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
            p.put(StreamsConfig.CLIENT_ID_CONFIG, app + "-" + name);
            p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
            p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, protocol);
            p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
            p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
            p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "2");
            p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
            p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
            p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
            p.put("consumer.auto.offset.reset", "earliest");
            p.put("consumer.session.timeout.ms", "10000");  // classic only (the broker's, with streams)
            p.put("consumer.heartbeat.interval.ms", "1000");
            StreamsBuilder builder = new StreamsBuilder();
            builder.<String, String>stream(input)
                .flatMapValues(line -> Arrays.asList(line.toLowerCase().split("\\s+")))
                .groupBy((key, word) -> word)
                .count()
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
            streams = new KafkaStreams(builder.build(), p);
            streams.setStateListener((now, before) -> say(name + ": state " + now + " (was " + before + ")"));
            streams.setUncaughtExceptionHandler(e -> {
                errors.add(e.toString());
                say(name + ": error " + e);
                e.printStackTrace(System.out);
                return StreamThreadExceptionResponse.REPLACE_THREAD;
            });
            streams.start();
        }

        /** The active tasks of this instance's threads ("subtopology_partition"). */
        Set<String> tasks() {
            Set<String> active = new TreeSet<>();
            for (ThreadMetadata t : streams.metadataForLocalThreads()) {
                for (TaskMetadata task : t.activeTasks()) active.add(task.taskId().toString());
            }
            return active;
        }

        boolean running() { return streams.state() == KafkaStreams.State.RUNNING; }
    }

    /** The latest count of each word in the output topic, read_committed, from its start. */
    static final class Counts implements AutoCloseable {
        final Map<String, Long> latest = new HashMap<>();
        final KafkaConsumer<String, Long> consumer;

        Counts(String topic, int partitions) {
            Properties p = Suite.common();
            p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            consumer = new KafkaConsumer<>(p, new StringDeserializer(), new LongDeserializer());
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
        }

        Map<String, Long> read() {
            for (ConsumerRecord<String, Long> r : consumer.poll(Duration.ofMillis(200))) latest.put(r.key(), r.value());
            return latest;
        }

        @Override
        public void close() { consumer.close(); }
    }

    /** Lines start..start+count-1 (key n, 1-5 words), the words added to {@code expected}. */
    static void produce(String topic, int start, int count, Map<String, Long> expected) throws Exception {
        Properties p = Suite.common();
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int n = start; n < start + count; n++) {
                List<String> words = new ArrayList<>();
                for (int i = 0; i < 1 + n % 5; i++) words.add(WORDS[(n * 7 + i * 3) % WORDS.length]);
                words.forEach(w -> expected.merge(w, 1L, Long::sum));
                producer.send(new ProducerRecord<>(topic, Integer.toString(n), String.join(" ", words)));
            }
            producer.flush();
        }
    }

    static void run(String bootstrap, String prefix, String guarantee, String protocol) throws Exception {
        String input = prefix + "-words", output = prefix + "-counts", app = prefix + "-wc";
        try (Admin admin = Admin.create(Suite.common())) {
            Suite.createTopic(admin, input, 4, Map.of());
            Suite.createTopic(admin, output, 2, Map.of());
        }
        Map<String, Long> expected = new HashMap<>();
        produce(input, 0, 300, expected);
        Path state = Files.createTempDirectory("headrace-compat-streams-");
        Instance first = null, second = null;
        try (Counts counts = new Counts(output, 2)) {
            first = new Instance("first", bootstrap, app, guarantee, protocol, state.resolve("first"), input, output);
            Suite.waitUntil(() -> counts.read().equals(expected), "the first instance's counts", STEP_S);
            say("the first instance's counts are exact");
            expect(first.tasks().equals(ALL_TASKS), "the first instance alone has tasks " + first.tasks());

            Instance a = first;
            Instance b = second = new Instance("second", bootstrap, app, guarantee, protocol, state.resolve("second"),
                input, output);
            Suite.waitUntil(() -> !b.tasks().isEmpty() && b.running(), "the second instance to get tasks", STEP_S);
            produce(input, 300, 300, expected);
            Suite.waitUntil(() -> {
                Set<String> both = new HashSet<>(a.tasks());
                both.retainAll(b.tasks());
                Set<String> all = new HashSet<>(a.tasks());
                all.addAll(b.tasks());
                return both.isEmpty() && all.equals(ALL_TASKS);
            }, "the tasks spread over both instances", STEP_S);
            say("tasks: first " + a.tasks() + ", second " + b.tasks());
            Suite.waitUntil(() -> counts.read().equals(expected), "the counts with both instances", STEP_S);
            say("the counts with both instances are exact");

            // leaving the group: else a classic instance's tasks move only once its session times out
            expect(first.streams.close(CloseOptions.groupMembershipOperation(GroupMembershipOperation.LEAVE_GROUP)
                .withTimeout(Duration.ofSeconds(30))), "the first instance did not close within 30 s");
            produce(input, 600, 300, expected);
            say("the first instance closed");
            Suite.waitUntil(() -> b.tasks().equals(ALL_TASKS), "the second instance to take every task", STEP_S);
            say("the second instance has every task");
            Suite.waitUntil(() -> counts.read().equals(expected), "the counts after the first left", STEP_S);
            say("the counts after the first left are exact");
            List<String> errors = new ArrayList<>(first.errors);
            errors.addAll(second.errors);
            expect(errors.isEmpty(), "uncaught errors in the stream threads: " + errors);
            if (protocol.equals("streams")) {
                try (Admin admin = Admin.create(Suite.common())) {
                    Map<String, GroupType> types = new HashMap<>();
                    for (GroupListing g : admin.listGroups().all().get(WAIT_S, TimeUnit.SECONDS)) {
                        types.put(g.groupId(), g.type().orElse(GroupType.UNKNOWN));
                    }
                    expect(types.get(app) == GroupType.STREAMS, "ListGroups lists " + app + " as " + types.get(app));
                }
            }
        } finally {
            for (Instance i : new Instance[] {first, second}) {
                if (i != null) i.streams.close(Duration.ofSeconds(30));
            }
            deleteTree(state);
        }
    }

    private static void deleteTree(Path root) {
        try (Stream<Path> paths = Files.walk(root)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            System.out.println("left " + root + ": " + e);
        }
    }
}
