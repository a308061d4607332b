// Kafka Streams' word count against a broker, run as a single-file program
// (java -cp <Kafka Streams' class path> WordCount.java BOOTSTRAP APP_ID INPUT OUTPUT
//  GUARANTEE PROTOCOL STATE_DIR RUN_FILE).
//
// Reads lines from INPUT, splits them into words, counts each word (a repartition by word,
// then a count in a state store with a changelog) and writes (word, count) to OUTPUT.
// GUARANTEE is at_least_once or exactly_once_v2; PROTOCOL is streams (KIP-1071: the broker
// assigns the tasks) or classic. Prints "state <NEW> <OLD>" at every state change and
// "tasks <active tasks>" when its assignment changes; runs while RUN_FILE exists, then
// closes (leaving the group) and prints "closed".
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.TreeSet;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;

public class WordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], input = args[2], output = args[3];
        String guarantee = args[4], protocol = args[5], stateDir = args[6];
        Path runFile = Path.of(args[7]);
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, protocol);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "2");
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        p.put("consumer.auto.offset.reset", "earliest");
        p.put("consumer.session.timeout.ms", "10000");
        p.put("consumer.heartbeat.interval.ms", "1000");
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> lines = builder.stream(input);
        lines.flatMapValues(line -> Arrays.asList(line.toLowerCase().split("\\s+")))
             .groupBy((key, word) -> word)
             .count()
             .toStream()
             .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        streams.setStateListener((now, before) -> System.out.println("state " + now + " " + before));
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("error " + e);
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                .StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        streams.start();
        String last = "";
        while (Files.exists(runFile)) {
            TreeSet<String> active = new TreeSet<>();
            for (ThreadMetadata t : streams.metadataForLocalThreads()) {
                for (TaskMetadata task : t.activeTasks()) {
                    active.add(task.taskId().toString());
                }
            }
            String now = String.join(",", active);
            if (!now.equals(last)) {
                System.out.println("tasks " + now);
                last = now;
            }
            Thread.sleep(200);
        }
        streams.close(Duration.ofSeconds(30));
        System.out.println("closed");
    }
}
