// Kafka's KafkaShareConsumer against a broker, run as a single-file program
// (java -cp <Kafka's class path> ShareCheck.java MODE BOOTSTRAP TOPIC GROUP ...).
//
// MODE consume CONSUMERS SECONDS [PAUSE_MS]: CONSUMERS share consumers in one share group,
// explicit acknowledgement: each record's value is its number n; n % 10 == 3 is released at
// its first delivery, n % 10 == 7 rejected, the rest accepted (after PAUSE_MS each). Prints
// one line per delivery, "got <consumer> <n> <delivery count> <ACCEPT|RELEASE|REJECT>", and
// one per acknowledgement the broker answered, "settled <offset> <ok|failed>", until nothing
// has come for SECONDS, then "done".
// MODE hold: one consumer polls until it holds records, prints "holding <count>" and halts
// the JVM without acknowledging or closing (a consumer killed while holding records).
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareCheck {
    static KafkaShareConsumer<String, String> consumer(String bootstrap, String group) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        p.put("max.poll.records", "50");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        return new KafkaShareConsumer<>(p);
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2], group = args[3];
        if (mode.equals("hold")) {
            KafkaShareConsumer<String, String> c = consumer(bootstrap, group);
            c.subscribe(List.of(topic));
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
            Runtime.getRuntime().halt(1);
        }
        int consumers = Integer.parseInt(args[4]);
        long quietMs = Long.parseLong(args[5]) * 1000;
        long pauseMs = args.length > 6 ? Long.parseLong(args[6]) : 0;
        AtomicLong last = new AtomicLong(System.currentTimeMillis());
        Thread[] threads = new Thread[consumers];
        for (int i = 0; i < consumers; i++) {
            final int id = i;
            threads[i] = new Thread(() -> {
                try (KafkaShareConsumer<String, String> c = consumer(bootstrap, group)) {
                    c.setAcknowledgementCommitCallback((offsets, error) -> {
                        synchronized (ShareCheck.class) {
                            for (java.util.Set<Long> set : offsets.values())
                                for (long o : set)
                                    System.out.println("settled " + o + " " + (error == null ? "ok" : "failed"));
                        }
                    });
                    c.subscribe(List.of(topic));
                    while (System.currentTimeMillis() - last.get() < quietMs) {
                        ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                        for (ConsumerRecord<String, String> r : records) {
                            int n = Integer.parseInt(r.value());
                            short count = r.deliveryCount().orElse((short) -1);
                            AcknowledgeType type = AcknowledgeType.ACCEPT;
                            if (n % 10 == 7) type = AcknowledgeType.REJECT;
                            else if (n % 10 == 3 && count == 1) type = AcknowledgeType.RELEASE;
                            if (pauseMs > 0) {
                                try {
                                    Thread.sleep(pauseMs);
                                } catch (InterruptedException e) {
                                    return;
                                }
                            }
                            c.acknowledge(r, type);
                            synchronized (ShareCheck.class) {
                                System.out.println("got " + id + " " + n + " " + count + " " + type.name());
                            }
                        }
                        if (records.count() > 0) {
                            try {
                                c.commitSync();
                            } catch (RuntimeException e) {
                                System.err.println("commitSync: " + e);
                            }
                            last.set(System.currentTimeMillis());
                        }
                    }
                }
            });
            threads[i].start();
        }
        for (Thread t : threads) t.join();
        System.out.println("done");
    }
}
