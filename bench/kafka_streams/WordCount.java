import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * The word count of bench/wordcount_kafka.py in Kafka Streams: split lines into words, re-key by
 * word through a repartition topic, count per word in a RocksDB store with a changelog,
 * at-least-once, one stream thread. Marks the first split and the moment the last word reaches
 * the count, then prints one JSON line: {"first": s, "last": s, "counted": n, "distinct": d, "total": t}
 * (epoch seconds; total is the sum of the store's counts, checked by the Python side).
 *
 * args: bootstrap input output application.id state.dir words commit.interval.ms
 */
public final class WordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], input = args[1], output = args[2], appId = args[3], stateDir = args[4];
        long words = Long.parseLong(args[5]);
        String commitMs = args[6];
        AtomicLong first = new AtomicLong(0), last = new AtomicLong(0), counted = new AtomicLong(0);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> {
                first.compareAndSet(0, System.currentTimeMillis());
                return Arrays.asList(line.split(" "));
            })
            .selectKey((key, word) -> word)
            .repartition(Repartitioned.with(Serdes.String(), Serdes.String()).withName("counts"))
            .peek((word, v) -> {
                // runs just before the count of this word: the last one marks the end
                if (counted.incrementAndGet() == words) last.set(System.currentTimeMillis());
            })
            .groupByKey()
            .count(Materialized.as("counts"))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.start();
        long deadline = System.currentTimeMillis() + 900_000;
        while (last.get() == 0) {
            if (System.currentTimeMillis() > deadline || streams.state() == KafkaStreams.State.ERROR) {
                System.err.println("Kafka Streams did not finish: " + counted.get() + "/" + words + " words, state " + streams.state());
                streams.close(Duration.ofSeconds(30));
                System.exit(2);
            }
            Thread.sleep(5);
        }
        long distinct = 0, total = 0;
        ReadOnlyKeyValueStore<String, Long> store = null;
        while (store == null) {
            try {
                store = streams.store(StoreQueryParameters.fromNameAndType("counts", QueryableStoreTypes.keyValueStore()));
            } catch (org.apache.kafka.streams.errors.InvalidStateStoreException e) {
                Thread.sleep(10);
            }
        }
        try (KeyValueIterator<String, Long> it = store.all()) {
            while (it.hasNext()) {
                KeyValue<String, Long> kv = it.next();
                distinct++;
                total += kv.value;
            }
        }
        streams.close(Duration.ofSeconds(60));
        System.out.println("{\"first\": " + first.get() / 1000.0 + ", \"last\": " + last.get() / 1000.0
            + ", \"counted\": " + counted.get() + ", \"distinct\": " + distinct + ", \"total\": " + total + "}");
    }
}
