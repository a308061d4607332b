package dev.headrace.compat;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * One pass over the client APIs a broker must serve: admin, idempotent producer (zstd, headers),
 * group consumer with commits, transactional producer (commit and abort, offsets in a
 * transaction), then admin inspection and topic deletion.
 *
 * Usage: Scenario BOOTSTRAP NAME [GROUP_PROTOCOL]
 * NAME prefixes the topic, group and transactional id; GROUP_PROTOCOL is "classic" (default)
 * or "consumer" (the consumer group protocol of KIP-848, clients and brokers 4.0+).
 */
public final class Scenario {
    private static final long TIMEOUT_S = 30;

    public static void main(String[] args) throws Exception {
        String bootstrap = args.length > 0 ? args[0] : "127.0.0.1:9092";
        String name = args.length > 1 ? args[1] : "java";
        String groupProtocol = args.length > 2 ? args[2] : "classic";
        String topic = name + "-topic";
        String group = name + "-group";
        String txnId = name + "-txn";

        Properties common = new Properties();
        common.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);

        try (Admin admin = Admin.create(common)) {
            step("create topic");
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            step("describe topic");
            admin.describeTopics(List.of(topic)).allTopicNames().get(TIMEOUT_S, TimeUnit.SECONDS);
            step("describe configs");
            admin.describeConfigs(List.of(new ConfigResource(ConfigResource.Type.TOPIC, topic)))
                .all().get(TIMEOUT_S, TimeUnit.SECONDS);
            step("create partitions");
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            step("describe cluster");
            admin.describeCluster().nodes().get(TIMEOUT_S, TimeUnit.SECONDS);
        }

        step("idempotent producer");
        Properties pp = new Properties();
        pp.putAll(common);
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "zstd");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < 3; i++) {
                ProducerRecord<String, String> rec = new ProducerRecord<>(topic, i % 3, "k" + i, "v" + i);
                rec.headers().add("h", ("x" + i).getBytes(StandardCharsets.UTF_8));
                producer.send(rec).get(TIMEOUT_S, TimeUnit.SECONDS);
            }
        }

        step("group consumer");
        Properties cp = new Properties();
        cp.putAll(common);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        if (!groupProtocol.equals("classic")) cp.put("group.protocol", groupProtocol);
        Map<TopicPartition, OffsetAndMetadata> positions;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + TIMEOUT_S * 1000;
            while (got.size() < 3 && System.currentTimeMillis() < deadline) {
                consumer.poll(Duration.ofMillis(500)).forEach(got::add);
            }
            if (got.size() < 3) throw new IllegalStateException("consumed only " + got.size() + " records");
            consumer.commitSync();
            positions = consumer.committed(consumer.assignment());
        }

        step("transactional producer");
        Properties tp = new Properties();
        tp.putAll(common);
        tp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        tp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "zstd");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(tp, new StringSerializer(), new StringSerializer())) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, "t", "committed"));
            Map<TopicPartition, OffsetAndMetadata> offsets = new java.util.HashMap<>();
            positions.forEach((k, v) -> { if (v != null) offsets.put(k, v); });
            producer.sendOffsetsToTransaction(offsets, new ConsumerGroupMetadata(group));
            producer.commitTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 1, "t", "aborted")).get(TIMEOUT_S, TimeUnit.SECONDS);
            producer.abortTransaction();
        }

        try (Admin admin = Admin.create(common)) {
            step("inspect groups, offsets, producers, transactions");
            admin.listConsumerGroups().all().get(TIMEOUT_S, TimeUnit.SECONDS);
            admin.describeConsumerGroups(List.of(group)).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(TIMEOUT_S, TimeUnit.SECONDS);
            TopicPartition tp0 = new TopicPartition(topic, 0);
            admin.listOffsets(Map.of(tp0, OffsetSpec.latest())).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            admin.describeProducers(List.of(tp0)).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            Set<String> txns = new java.util.HashSet<>();
            for (TransactionListing t : admin.listTransactions().all().get(TIMEOUT_S, TimeUnit.SECONDS)) {
                txns.add(t.transactionalId());
            }
            admin.describeTransactions(Collections.singleton(txnId)).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            step("delete records and topic");
            admin.deleteRecords(Map.of(tp0, org.apache.kafka.clients.admin.RecordsToDelete.beforeOffset(1)))
                .all().get(TIMEOUT_S, TimeUnit.SECONDS);
            admin.deleteConsumerGroups(List.of(group)).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            admin.deleteTopics(List.of(topic)).all().get(TIMEOUT_S, TimeUnit.SECONDS);
        }
        step("done");
    }

    private static void step(String what) {
        System.out.println("[scenario] " + what);
        System.out.flush();
    }
}
