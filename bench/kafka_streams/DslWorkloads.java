import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.ForeachAction;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * Kafka Streams' side of bench/dsl_kafka.py: one of bench/windowed.py's workloads (its word
 * count, its table aggregation in either design, its stream-stream join), one stream
 * thread, at-least-once, Kafka's defaults except the commit interval (and max.task.idle.ms 200
 * for the join, as windowed.py runs it). Timed from RUNNING until the work is done: word count,
 * when the last word reaches the count (a peek right before the count); the table, when its
 * count store (read through interactive queries every 10 ms, 100 groups) holds the expected
 * final count of every group; the join, when every input record has gone through it (a peek on
 * each side before it). Prints one JSON line {"running": s, "done": s, "joined": n} (epoch
 * seconds; the join's results, counted by a peek after it).
 *
 * args: wordcount|table|stream_stream bootstrap input output application.id state.dir
 *       commit.interval.ms expected [table design [statestore.cache.max.bytes]]
 * (input: the join's two topics as "orders,payments"; expected: wordcount the number of words,
 * table a file of "group count" lines with the final counts, stream_stream the number of input records;
 * table design: "uncached-hot" (the source table's store "users" with caching disabled) or any
 * other of windowed.py's --table-design ("spread", "cached-hot": the source table as
 * builder.table leaves it); the cache size: Kafka's default when not given)
 */
public final class DslWorkloads {
    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], input = args[2], output = args[3], appId = args[4];
        String stateDir = args[5], commitMs = args[6];
        // words counted or join inputs processed, and when the last one was; the join's results
        AtomicLong counted = new AtomicLong(0), finished = new AtomicLong(0), joined = new AtomicLong(0);
        long target = 0;
        Map<String, Long> expected = new HashMap<>();
        if (!mode.equals("table")) {
            target = Long.parseLong(args[7]);
        } else {
            for (String line : Files.readAllLines(Paths.get(args[7]))) {
                String[] parts = line.split(" ");
                expected.put(parts[0], Long.parseLong(parts[1]));
            }
        }
        final long toCount = target;

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
                    if (counted.incrementAndGet() == toCount) finished.set(System.currentTimeMillis());
                })
                .groupByKey()
                .count(Materialized.as(store))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        } else if (mode.equals("stream_stream")) {
            store = null;
            String[] inputs = input.split(",");
            // done when every input record went through the join (a peek on each side before it)
            ForeachAction<String, String> processed = (key, value) -> {
                if (counted.incrementAndGet() == toCount) finished.set(System.currentTimeMillis());
            };
            builder.stream(inputs[0], Consumed.with(Serdes.String(), Serdes.String()))
                .peek(processed)
                .join(builder.stream(inputs[1], Consumed.with(Serdes.String(), Serdes.String())).peek(processed),
                      (order, method) -> order + " paid by " + method,
                      JoinWindows.ofTimeDifferenceWithNoGrace(Duration.ofSeconds(10)),
                      StreamJoined.with(Serdes.String(), Serdes.String(), Serdes.String()))
                .peek((order, paid) -> joined.incrementAndGet())
                .to(output, Produced.with(Serdes.String(), Serdes.String()));
        } else {
            store = "users-per-group";
            boolean uncached = args.length > 8 && args[8].equals("uncached-hot");
            Materialized<String, String, KeyValueStore<Bytes, byte[]>> source = uncached
                ? Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("users").withCachingDisabled()
                : Materialized.with(Serdes.String(), Serdes.String());
            builder.table(input, Consumed.with(Serdes.String(), Serdes.String()), source)
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
        if (args.length > 9) props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, args[9]);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        if (mode.equals("stream_stream")) props.put(StreamsConfig.MAX_TASK_IDLE_MS_CONFIG, "200");

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
            if (!mode.equals("table")) {
                done = finished.get();
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
        System.out.println("{\"running\": " + running.get() / 1000.0 + ", \"done\": " + done / 1000.0
            + ", \"joined\": " + joined.get() + "}");
    }
}
