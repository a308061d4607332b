// End-to-end latency at a fixed produce rate, for any Kafka-wire broker.
//
// Run as a single-file program against the kafka-clients class path:
//   java -cp CP bench/java/EndToEndRate.java BOOTSTRAP TOPIC RECORDS_PER_SEC RECORD_SIZE SECONDS WARMUP_SECONDS
//
// One producer (acks=all, otherwise the client's defaults) sends RECORD_SIZE-byte records to
// partition 0 at RECORDS_PER_SEC for SECONDS. Each record carries, in its first 8 bytes, the
// System.nanoTime() at which it was *due* to be sent (not when send() ran), so a producer that
// falls behind shows up as latency instead of silently slowing the schedule down. One
// consumer in the same JVM reads partition 0 with assign() (no consumer group, no commits)
// and records now - due for every record. Records due in the first WARMUP_SECONDS are not
// counted. The last line printed is
//   E2E sent=.. received=.. counted=.. errors=.. achieved_rps=.. avg_ms=.. p50_ms=.. p99_ms=.. p999_ms=.. max_ms=..

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class EndToEndRate {
    public static void main(String[] args) throws Exception {
        if (args.length != 6) {
            System.err.println("usage: BOOTSTRAP TOPIC RECORDS_PER_SEC RECORD_SIZE SECONDS WARMUP_SECONDS");
            System.exit(2);
        }
        String bootstrap = args[0];
        String topic = args[1];
        long rate = Long.parseLong(args[2]);
        int size = Math.max(8, Integer.parseInt(args[3]));
        double seconds = Double.parseDouble(args[4]);
        double warmup = Double.parseDouble(args[5]);
        long total = (long) (rate * seconds);
        long skip = (long) (rate * warmup);
        long intervalNs = 1_000_000_000L / rate;

        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("acks", "all");
        pp.put("key.serializer", ByteArraySerializer.class.getName());
        pp.put("value.serializer", ByteArraySerializer.class.getName());
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("enable.auto.commit", "false");
        cp.put("auto.offset.reset", "earliest");
        cp.put("key.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("value.deserializer", ByteArrayDeserializer.class.getName());

        long[] lat = new long[(int) Math.max(0, total - skip)];
        AtomicLong received = new AtomicLong();
        AtomicLong errors = new AtomicLong();
        AtomicBoolean stop = new AtomicBoolean();
        TopicPartition tp = new TopicPartition(topic, 0);

        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);
             KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
            consumer.assign(List.of(tp));
            consumer.seekToEnd(List.of(tp));
            long startOffset = consumer.position(tp);
            producer.partitionsFor(topic);  // metadata before the clock starts

            Thread reader = new Thread(() -> {
                int n = 0;
                while (received.get() < total && !stop.get()) {
                    ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(100));
                    long now = System.nanoTime();
                    for (ConsumerRecord<byte[], byte[]> r : recs) {
                        long idx = r.offset() - startOffset;
                        long due = ByteBuffer.wrap(r.value()).getLong();
                        if (idx >= skip && n < lat.length) {
                            lat[n++] = now - due;
                        }
                        received.incrementAndGet();
                    }
                }
            });
            reader.start();

            byte[] payload = new byte[size];
            long start = System.nanoTime() + 50_000_000L;
            long sent = 0;
            while (sent < total) {
                long now = System.nanoTime();
                long dueCount = now < start ? 0 : Math.min(total, (now - start) / intervalNs + 1);
                while (sent < dueCount) {
                    byte[] v = payload.clone();
                    ByteBuffer.wrap(v).putLong(start + sent * intervalNs);
                    producer.send(new ProducerRecord<>(topic, 0, null, v), (md, ex) -> {
                        if (ex != null) errors.incrementAndGet();
                    });
                    sent++;
                }
                LockSupport.parkNanos(20_000L);
            }
            producer.flush();
            double elapsed = (System.nanoTime() - start) / 1e9;
            long drainDeadline = System.nanoTime() + 30_000_000_000L;
            while (received.get() < total && System.nanoTime() < drainDeadline) {
                Thread.sleep(10);
            }
            stop.set(true);
            reader.join();
            int counted = (int) Math.max(0, Math.min(lat.length, received.get() - skip));
            long[] l = Arrays.copyOf(lat, counted);
            Arrays.sort(l);
            double avg = 0;
            for (long x : l) avg += x;
            avg = counted > 0 ? avg / counted / 1e6 : 0;
            System.out.printf("E2E sent=%d received=%d counted=%d errors=%d achieved_rps=%.1f "
                            + "avg_ms=%.3f p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f%n",
                    sent, received.get(), counted, errors.get(), sent / elapsed, avg,
                    pct(l, 0.50), pct(l, 0.99), pct(l, 0.999),
                    counted > 0 ? l[counted - 1] / 1e6 : 0.0);
        }
        System.exit(0);
    }

    static double pct(long[] sorted, double q) {
        if (sorted.length == 0) return 0;
        int i = (int) Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1);
        return sorted[Math.max(0, i)] / 1e6;
    }
}
