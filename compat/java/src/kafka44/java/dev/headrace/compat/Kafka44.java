package dev.headrace.compat;

/**
 * The scenarios only kafka-clients 4.4 can run (compiled by the kafka44 Maven profile alone;
 * {@link Suite} finds this class by name and answers n/a where it is missing): the share
 * consumer of KIP-932 ({@link ShareGroups}) and Kafka Streams with group.protocol=streams of
 * KIP-1071 ({@link StreamsWordCount}).
 */
public final class Kafka44 {
    private Kafka44() {}

    public static void run(String scenario, String bootstrap, String prefix) throws Exception {
        switch (scenario) {
            case "share-group" -> ShareGroups.shareGroup(bootstrap, prefix);
            case "cluster-share-leader-kill-9" -> ShareGroups.leaderKill9(bootstrap, prefix);
            case "streams-at-least-once" ->
                StreamsWordCount.run(bootstrap, prefix, "at_least_once", "streams");
            case "streams-exactly-once-v2" ->
                StreamsWordCount.run(bootstrap, prefix, "exactly_once_v2", "streams");
            case "streams-classic-protocol" ->
                StreamsWordCount.run(bootstrap, prefix, "at_least_once", "classic");
            default -> throw new Suite.Failed("unknown scenario " + scenario);
        }
    }
}
