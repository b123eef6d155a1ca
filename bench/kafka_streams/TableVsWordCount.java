import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * Kafka Streams' side of bench/table_kafka.py: bench/windowed.py's word count or its table
 * aggregation (default design), one stream thread, at-least-once, Kafka's defaults except the
 * commit interval. Timed from RUNNING until the work is done: word count, when the last word
 * reaches the count (a peek right before it counts the words); the table, when its count store
 * (read through interactive queries every 10 ms, 100 groups) holds the expected final count of
 * every group. Prints one JSON line {"running": s, "done": s} (epoch seconds).
 *
 * args: wordcount|table bootstrap input output application.id state.dir commit.interval.ms expected
 * (wordcount: the number of words; table: a file of "group count" lines, the final counts)
 */
public final class TableVsWordCount {
    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], input = args[2], output = args[3], appId = args[4];
        String stateDir = args[5], commitMs = args[6];
        AtomicLong counted = new AtomicLong(0), lastWord = new AtomicLong(0);
        long words = 0;
        Map<String, Long> expected = new HashMap<>();
        if (mode.equals("wordcount")) {
            words = Long.parseLong(args[7]);
        } else {
            for (String line : Files.readAllLines(Paths.get(args[7]))) {
                String[] parts = line.split(" ");
                expected.put(parts[0], Long.parseLong(parts[1]));
            }
        }
        final long wordsToCount = words;

        StreamsBuilder builder = new StreamsBuilder();
        String store;
        if (mode.equals("wordcount")) {
            store = "counts";
            builder.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.split(" ")))
                // groupBy's re-keying and repartition topic, spelled out to peek right before the count
                .selectKey((key, word) -> word)
                .repartition(Repartitioned.with(Serdes.String(), Serdes.String()))
                .peek((word, v) -> {
                    if (counted.incrementAndGet() == wordsToCount) lastWord.set(System.currentTimeMillis());
                })
                .groupByKey()
                .count(Materialized.as(store))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        } else {
            store = "users-per-group";
            builder.table(input, Consumed.with(Serdes.String(), Serdes.String()))
                .groupBy((user, group) -> KeyValue.pair(group, user), Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.as(store))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        }

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

        AtomicLong running = new AtomicLong(0);
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) running.compareAndSet(0, System.currentTimeMillis());
        });
        streams.start();
        long deadline = System.currentTimeMillis() + 1_800_000;
        long done = 0;
        while (done == 0) {
            if (System.currentTimeMillis() > deadline || streams.state() == KafkaStreams.State.ERROR) {
                System.err.println("Kafka Streams did not finish, state " + streams.state());
                streams.close(Duration.ofSeconds(30));
                System.exit(2);
            }
            Thread.sleep(10);
            if (running.get() == 0) continue;
            if (mode.equals("wordcount")) {
                done = lastWord.get();
                continue;
            }
            try {
                ReadOnlyKeyValueStore<String, Long> counts =
                    streams.store(StoreQueryParameters.fromNameAndType(store, QueryableStoreTypes.keyValueStore()));
                Map<String, Long> got = new HashMap<>();
                try (KeyValueIterator<String, Long> it = counts.all()) {
                    while (it.hasNext()) {
                        KeyValue<String, Long> kv = it.next();
                        if (kv.value != null && kv.value > 0) got.put(kv.key, kv.value);
                    }
                }
                if (got.equals(expected)) done = System.currentTimeMillis();
            } catch (org.apache.kafka.streams.errors.InvalidStateStoreException e) {
                // not queryable yet
            }
        }
        streams.close(Duration.ofSeconds(60));
        System.out.println("{\"running\": " + running.get() / 1000.0 + ", \"done\": " + done / 1000.0 + "}");
    }
}
