package dev.headrace.compat.registry;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

// Avro 1.11.3 and Confluent's registry client 7.5.3, relocated by Flink's
// flink-sql-avro-confluent-registry (the form in which they are on Maven Central)
import org.apache.flink.avro.registry.confluent.shaded.io.confluent.kafka.schemaregistry.avro.AvroSchema;
import org.apache.flink.avro.registry.confluent.shaded.io.confluent.kafka.schemaregistry.client.CachedSchemaRegistryClient;
import org.apache.flink.avro.registry.confluent.shaded.io.confluent.kafka.schemaregistry.client.SchemaRegistryClient;
import org.apache.flink.avro.registry.confluent.shaded.io.confluent.kafka.schemaregistry.client.rest.exceptions.RestClientException;
import org.apache.flink.avro.shaded.org.apache.avro.Schema;
import org.apache.flink.avro.shaded.org.apache.avro.generic.GenericData;
import org.apache.flink.avro.shaded.org.apache.avro.generic.GenericDatumReader;
import org.apache.flink.avro.shaded.org.apache.avro.generic.GenericDatumWriter;
import org.apache.flink.avro.shaded.org.apache.avro.generic.GenericRecord;
import org.apache.flink.avro.shaded.org.apache.avro.io.BinaryEncoder;
import org.apache.flink.avro.shaded.org.apache.avro.io.DecoderFactory;
import org.apache.flink.avro.shaded.org.apache.avro.io.EncoderFactory;
import org.apache.flink.formats.avro.registry.confluent.ConfluentSchemaRegistryCoder;

/**
 * Avro records through Headrace's schema registry with Confluent's Java registry client: an
 * Order schema registered (and looked up), records produced in Confluent's wire format
 * (magic byte 0, the 4-byte schema id, the Avro binary: Flink's ConfluentSchemaRegistryCoder
 * writes and reads the prefix, registering the writer's schema and fetching it by id), the
 * schema evolved compatibly (a field with a default), an incompatible change refused (409),
 * and every record consumed and read with the newest schema.
 *
 * Usage: AvroRoundTrip BOOTSTRAP REGISTRY_URL NAME  (NAME names the topic; subject NAME-value).
 * Prints one "ok ..." line a step, and "canonical TEXT": the client's canonical text of v1;
 * exits 1 on the first thing not as expected.
 */
public final class AvroRoundTrip {
    static final String V1 = "{\"type\":\"record\",\"name\":\"Order\",\"namespace\":\"shop\","
            + "\"fields\":[{\"name\":\"id\",\"type\":\"long\"},{\"name\":\"item\",\"type\":\"string\"}]}";
    static final String V2 = "{\"type\":\"record\",\"name\":\"Order\",\"namespace\":\"shop\","
            + "\"fields\":[{\"name\":\"id\",\"type\":\"long\"},{\"name\":\"item\",\"type\":\"string\"},"
            + "{\"name\":\"quantity\",\"type\":\"int\",\"default\":1}]}";
    static final String BAD = "{\"type\":\"record\",\"name\":\"Order\",\"namespace\":\"shop\","
            + "\"fields\":[{\"name\":\"id\",\"type\":\"string\"}]}";

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], url = args[1], topic = args[2];
        String subject = topic + "-value";
        SchemaRegistryClient registry = new CachedSchemaRegistryClient(url, 100);

        AvroSchema v1 = new AvroSchema(V1);
        int id1 = registry.register(subject, v1);
        check(registry.getId(subject, new AvroSchema(V1)) == id1, "lookup finds version 1's id");
        check(registry.getSchemaById(id1).canonicalString().equals(v1.canonicalString()),
                "the schema by id is the one registered");
        ok("registered v1 as id " + id1);
        System.out.println("canonical " + v1.canonicalString()); // (the text Confluent keeps)

        Properties common = new Properties();
        common.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        try (KafkaProducer<String, GenericRecord> producer = new KafkaProducer<>(
                p, new StringSerializer(), new AvroSerializer(registry, subject))) {
            for (long i = 0; i < 3; i++) {
                GenericRecord r = new GenericData.Record(v1.rawSchema());
                r.put("id", i);
                r.put("item", "item-" + i);
                producer.send(new ProducerRecord<>(topic, "k" + i, r)).get(30, TimeUnit.SECONDS);
            }
            ok("produced 3 records with v1");

            AvroSchema v2 = new AvroSchema(V2);
            check(registry.testCompatibility(subject, v2), "v2 (a field with a default) is compatible");
            int id2 = registry.register(subject, v2);
            check(id2 != id1, "v2 has an id of its own");
            check(registry.getAllVersions(subject).equals(List.of(1, 2)), "the subject holds versions 1 and 2");
            ok("registered v2 as id " + id2);
            for (long i = 3; i < 5; i++) {
                GenericRecord r = new GenericData.Record(v2.rawSchema());
                r.put("id", i);
                r.put("item", "item-" + i);
                r.put("quantity", (int) i * 10);
                producer.send(new ProducerRecord<>(topic, "k" + i, r)).get(30, TimeUnit.SECONDS);
            }
            ok("produced 2 records with v2");

            AvroSchema bad = new AvroSchema(BAD);
            check(!registry.testCompatibility(subject, bad), "a changed field type is incompatible");
            try {
                registry.register(subject, bad);
                fail("an incompatible schema was registered");
            } catch (RestClientException e) {
                check(e.getStatus() == 409 && e.getErrorCode() == 409, "refused with 409: " + e.getMessage());
            }
            check(registry.getAllVersions(subject).equals(List.of(1, 2)), "no version 3");
            ok("an incompatible change is refused with 409");

            Properties c = new Properties();
            c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            AvroDeserializer values = new AvroDeserializer(registry, v2.rawSchema());
            List<GenericRecord> read = new ArrayList<>();
            try (KafkaConsumer<String, GenericRecord> consumer = new KafkaConsumer<>(
                    c, new StringDeserializer(), values)) {
                consumer.assign(List.of(new TopicPartition(topic, 0)));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (read.size() < 5 && System.nanoTime() < deadline) {
                    for (ConsumerRecord<String, GenericRecord> r : consumer.poll(Duration.ofMillis(500))) {
                        read.add(r.value());
                    }
                }
            }
            check(read.size() == 5, "5 records read back, got " + read.size());
            check(values.ids.equals(List.of(id1, id1, id1, id2, id2)), "ids on the wire: " + values.ids);
            for (int i = 0; i < 5; i++) {
                GenericRecord r = read.get(i);
                int quantity = i < 3 ? 1 : i * 10; // v1's records take v2's default
                check((Long) r.get("id") == i && r.get("item").toString().equals("item-" + i)
                        && (Integer) r.get("quantity") == quantity, "record " + i + " is " + r);
            }
            ok("consumed and read 5 records with v2 (v1's with the default)");
        }
        System.out.println("done");
    }

    /** A GenericRecord in Confluent's wire format, its schema registered under the subject. */
    static final class AvroSerializer implements Serializer<GenericRecord> {
        private final ConfluentSchemaRegistryCoder coder;

        AvroSerializer(SchemaRegistryClient registry, String subject) {
            this.coder = new ConfluentSchemaRegistryCoder(subject, registry);
        }

        @Override
        public byte[] serialize(String topic, GenericRecord record) {
            try {
                ByteArrayOutputStream out = new ByteArrayOutputStream();
                coder.writeSchema(record.getSchema(), out);
                BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(out, null);
                new GenericDatumWriter<GenericRecord>(record.getSchema()).write(record, encoder);
                encoder.flush();
                return out.toByteArray();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    /** Confluent's wire format read with the writer's schema (by its id) into ``reader``. */
    static final class AvroDeserializer implements Deserializer<GenericRecord> {
        private final ConfluentSchemaRegistryCoder coder;
        private final Schema reader;
        final List<Integer> ids = new ArrayList<>();

        AvroDeserializer(SchemaRegistryClient registry, Schema reader) {
            this.coder = new ConfluentSchemaRegistryCoder(registry);
            this.reader = reader;
        }

        @Override
        public GenericRecord deserialize(String topic, byte[] data) {
            try {
                ids.add(ByteBuffer.wrap(data, 1, 4).getInt());
                ByteArrayInputStream in = new ByteArrayInputStream(data);
                Schema writer = coder.readSchema(in);
                return new GenericDatumReader<GenericRecord>(writer, reader)
                        .read(null, DecoderFactory.get().binaryDecoder(in, null));
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    static void check(boolean condition, String what) {
        if (!condition) {
            fail(what);
        }
    }

    static void ok(String what) {
        System.out.println("ok " + what);
    }

    static void fail(String what) {
        System.out.println("FAILED " + what);
        System.exit(1);
    }
}
