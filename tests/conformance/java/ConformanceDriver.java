import java.io.File;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.function.BiFunction;
import java.util.function.BinaryOperator;
import java.util.function.Function;
import java.util.function.Supplier;
import java.util.stream.Collectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.TopologyConfig;
import org.apache.kafka.streams.errors.TopologyException;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Aggregator;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.CogroupedKStream;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KGroupedTable;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.KeyValueMapper;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Predicate;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Reducer;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.kstream.SessionWindowedCogroupedKStream;
import org.apache.kafka.streams.kstream.SessionWindowedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TableJoined;
import org.apache.kafka.streams.kstream.TimeWindowedCogroupedKStream;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.ValueMapper;
import org.apache.kafka.streams.kstream.ValueTransformerWithKey;
import org.apache.kafka.streams.kstream.ValueTransformerWithKeySupplier;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.kstream.WindowedSerdes;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.RecordContext;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.BuiltInDslStoreSuppliers;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.ValueAndTimestamp;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Runs conformance scenarios (tests/conformance/vocabulary.py, which describes them) through Kafka
 * Streams' own TopologyTestDriver. args: scenarios.json state.dir. Each result is one line of
 * stdout, {"seed", "output": [[key, value, timestamp]...], "store": {name: rows}, "error": text | null},
 * written as its scenario ends (the harness compares while the next ones run).
 * The named functions below are the twins of vocabulary.py's, name for name, None for null.
 */
@SuppressWarnings({"unchecked", "rawtypes", "deprecation"})
public final class ConformanceDriver {
    static final Map<String, Function<String, String>> VALUE_MAPPERS = new HashMap<>();
    static final Map<String, Function<String, List<String>>> VALUE_SPLITTERS = new HashMap<>();
    static final Map<String, BiFunction<String, String, Boolean>> PREDICATES = new HashMap<>();
    static final Map<String, BiFunction<String, String, String>> KEY_SELECTORS = new HashMap<>();
    static final Map<String, BiFunction<String, String, KeyValue<String, String>>> KV_MAPPERS = new HashMap<>();
    static final Map<String, BiFunction<String, String, List<KeyValue<String, String>>>> KV_SPLITTERS = new HashMap<>();
    static final Map<String, BinaryOperator<String>> REDUCERS = new HashMap<>();
    static final Map<String, Agg> AGGREGATORS = new HashMap<>();
    static final Map<String, BinaryOperator<String>[]> TABLE_REDUCERS = new HashMap<>();
    static final Map<String, TableAgg> TABLE_AGGREGATORS = new HashMap<>();
    static final Map<String, CoAgg> COGROUP_AGGREGATORS = new HashMap<>();
    static final Map<String, BinaryOperator<String>> JOINERS = new HashMap<>();
    static final Map<String, Function<String, String>> FK_EXTRACTORS = new HashMap<>();
    static final Map<String, BiFunction<Object, RecordContext, String>> OUTPUT_EXTRACTORS = new HashMap<>();

    interface Fn3 { Object apply(Object a, Object b, Object c); }

    /** initializer, aggregator(key, value, aggregate), session merger(key, a, b), value type */
    record Agg(Supplier<Object> init, Fn3 add, Fn3 merge, String type) {}
    /** initializer, the first stream's aggregator, the second stream's, session merger, value type */
    record CoAgg(Supplier<Object> init, Fn3 first, Fn3 second, Fn3 merge, String type) {}
    /** initializer, adder(key, value, aggregate), subtractor(key, value, aggregate), value type */
    record TableAgg(Supplier<Object> init, Fn3 add, Fn3 subtract, String type) {}

    static String firstChar(String v) { return v == null || v.isEmpty() ? null : v.substring(0, 1); }
    static List<String> words(String v) {
        return v == null ? new ArrayList<>() : Arrays.stream(v.split(" ")).filter(w -> !w.isEmpty()).collect(Collectors.toList());
    }
    static String s(Object v) { return v == null ? "" : (String) v; }
    static long length(Object v) { return v == null ? 0 : ((String) v).length(); }
    static String max(String a, String v) { return a == null ? v : v == null ? a : (a.compareTo(v) >= 0 ? a : v); }
    static String longer(String a, String v) { return length(v) > length(a) ? v : a; }

    static {
        VALUE_MAPPERS.put("upper", v -> v == null ? null : v.toUpperCase());
        VALUE_MAPPERS.put("exclaim", v -> v == null ? null : v + "!");
        VALUE_MAPPERS.put("first_word", v -> v == null ? null : v.split(" ", -1)[0]);
        VALUE_MAPPERS.put("drop_to_null", v -> v == null || v.startsWith("b") ? null : v);
        VALUE_SPLITTERS.put("words", ConformanceDriver::words);
        VALUE_SPLITTERS.put("twice", v -> Arrays.asList(v, v));
        PREDICATES.put("value_has_a", (k, v) -> v != null && v.contains("a"));
        PREDICATES.put("value_is_short", (k, v) -> v != null && v.length() <= 3);
        PREDICATES.put("key_present", (k, v) -> k != null);
        KEY_SELECTORS.put("value", (k, v) -> v);
        KEY_SELECTORS.put("first_char", (k, v) -> firstChar(v));
        KEY_SELECTORS.put("key_upper", (k, v) -> k == null ? null : k.toUpperCase());
        KV_MAPPERS.put("swap", (k, v) -> KeyValue.pair(v, k));
        KV_MAPPERS.put("by_first_char", (k, v) -> KeyValue.pair(firstChar(v), v));
        KV_MAPPERS.put("key_upper", (k, v) -> KeyValue.pair(k == null ? null : k.toUpperCase(), v));
        KV_SPLITTERS.put("words_as_keys", (k, v) -> words(v).stream().map(w -> KeyValue.pair(w, k)).collect(Collectors.toList()));
        KV_SPLITTERS.put("both_ways", (k, v) -> Arrays.asList(KeyValue.pair(k, v), KeyValue.pair(v, k)));
        REDUCERS.put("concat", (a, v) -> s(a) + "|" + s(v));
        REDUCERS.put("max", ConformanceDriver::max);
        REDUCERS.put("longer", ConformanceDriver::longer);
        AGGREGATORS.put("sum_of_lengths", new Agg(() -> 0L, (k, v, a) -> (Long) a + length(v), (k, a, b) -> (Long) a + (Long) b, "long"));
        AGGREGATORS.put("concat", new Agg(() -> "", (k, v, a) -> a + "," + s(v), (k, a, b) -> a + "&" + b, "string"));
        COGROUP_AGGREGATORS.put("weighted_lengths", new CoAgg(() -> 0L, (k, v, a) -> (Long) a + length(v),
            (k, v, a) -> (Long) a + 100 * length(v), (k, a, b) -> (Long) a + (Long) b, "long"));
        COGROUP_AGGREGATORS.put("tagged_concat", new CoAgg(() -> "", (k, v, a) -> a + "," + s(v),
            (k, v, a) -> a + ";" + s(v), (k, a, b) -> a + "&" + b, "string"));
        TABLE_REDUCERS.put("plus_minus", new BinaryOperator[] {
            (BinaryOperator<String>) (a, v) -> s(a) + "+" + s(v), (BinaryOperator<String>) (a, v) -> s(a) + "-" + s(v)});
        TABLE_REDUCERS.put("longer_keep", new BinaryOperator[] {
            (BinaryOperator<String>) ConformanceDriver::longer, (BinaryOperator<String>) (a, v) -> a});
        TABLE_AGGREGATORS.put("sum_of_lengths", new TableAgg(() -> 0L, (k, v, a) -> (Long) a + length(v), (k, v, a) -> (Long) a - length(v), "long"));
        TABLE_AGGREGATORS.put("trace", new TableAgg(() -> "", (k, v, a) -> a + "+" + s(v), (k, v, a) -> a + "-" + s(v), "string"));
        JOINERS.put("pair", (l, r) -> l + "+" + r);
        JOINERS.put("both_or_none", (l, r) -> l == null || r == null ? null : l + r);
        FK_EXTRACTORS.put("first_char", ConformanceDriver::firstChar);
        FK_EXTRACTORS.put("first_word", v -> v == null ? null : v.split(" ", -1)[0]);
        FK_EXTRACTORS.put("first_char_not_b", v -> firstChar(v) == null || firstChar(v).equals("b") ? null : firstChar(v));
        OUTPUT_EXTRACTORS.put("odd_timestamps_apart", (v, context) -> context.timestamp() % 2 != 0 ? "output2" : "output");
        OUTPUT_EXTRACTORS.put("tombstones_apart", (v, context) -> v == null ? "output2" : "output");
        OUTPUT_EXTRACTORS.put("other_topics_apart", (v, context) -> "input".equals(context.topic()) ? "output" : "output2");
        OUTPUT_EXTRACTORS.put("odd_offsets_apart", (v, context) -> context.offset() % 2 != 0 ? "output2" : "output");
    }

    static final Serde STRING = Serdes.String();
    static final Serde LONG = Serdes.Long();

    static Serde serde(String type) { return type.equals("long") ? LONG : STRING; }

    static <T> T fn(Map<String, T> table, JsonNode step, String field) {
        String name = step.get(field).asText();
        boolean fails = name.startsWith(FAILING);
        T f = table.get(fails ? name.substring(FAILING.length()) : name);
        if (f == null) throw new IllegalArgumentException("unknown function " + step);
        return fails ? failing(table, f) : f;
    }

    /** vocabulary.py's FAILING and FAIL_MARK: a named function's failing twin is the function,
     *  throwing on a value that contains the mark (the value a record, an aggregator or a mapper
     *  is given; either side of a joiner). */
    static final String FAILING = "fails_", FAIL_MARK = "cab";

    static void check(Object... values) {
        for (Object v : values)
            if (v instanceof String && ((String) v).contains(FAIL_MARK))
                throw new IllegalStateException("conformance: '" + v + "' contains '" + FAIL_MARK + "'");
    }

    static <T> T failing(Map<String, T> table, T f) {
        Object twin;
        if (table == (Map) VALUE_MAPPERS || table == (Map) FK_EXTRACTORS) {
            Function<String, String> g = (Function<String, String>) f;
            twin = (Function<String, String>) v -> { check(v); return g.apply(v); };
        } else if (table == (Map) VALUE_SPLITTERS) {
            Function<String, List<String>> g = (Function<String, List<String>>) f;
            twin = (Function<String, List<String>>) v -> { check(v); return g.apply(v); };
        } else if (table == (Map) PREDICATES) {
            BiFunction<String, String, Boolean> g = (BiFunction<String, String, Boolean>) f;
            twin = (BiFunction<String, String, Boolean>) (k, v) -> { check(v); return g.apply(k, v); };
        } else if (table == (Map) KEY_SELECTORS) {
            BiFunction<String, String, String> g = (BiFunction<String, String, String>) f;
            twin = (BiFunction<String, String, String>) (k, v) -> { check(v); return g.apply(k, v); };
        } else if (table == (Map) KV_MAPPERS) {
            BiFunction<String, String, KeyValue<String, String>> g = (BiFunction<String, String, KeyValue<String, String>>) f;
            twin = (BiFunction<String, String, KeyValue<String, String>>) (k, v) -> { check(v); return g.apply(k, v); };
        } else if (table == (Map) KV_SPLITTERS) {
            BiFunction<String, String, List<KeyValue<String, String>>> g = (BiFunction<String, String, List<KeyValue<String, String>>>) f;
            twin = (BiFunction<String, String, List<KeyValue<String, String>>>) (k, v) -> { check(v); return g.apply(k, v); };
        } else if (table == (Map) REDUCERS) {
            BinaryOperator<String> g = (BinaryOperator<String>) f;
            twin = (BinaryOperator<String>) (a, v) -> { check(v); return g.apply(a, v); };
        } else if (table == (Map) JOINERS) {
            BinaryOperator<String> g = (BinaryOperator<String>) f;
            twin = (BinaryOperator<String>) (l, r) -> { check(l, r); return g.apply(l, r); };
        } else if (table == (Map) AGGREGATORS) {
            Agg a = (Agg) f;
            twin = new Agg(a.init(), failingMiddle(a.add()), a.merge(), a.type());
        } else if (table == (Map) COGROUP_AGGREGATORS) {
            CoAgg a = (CoAgg) f;
            twin = new CoAgg(a.init(), failingMiddle(a.first()), failingMiddle(a.second()), a.merge(), a.type());
        } else if (table == (Map) TABLE_AGGREGATORS) {
            TableAgg a = (TableAgg) f;
            twin = new TableAgg(a.init(), failingMiddle(a.add()), failingMiddle(a.subtract()), a.type());
        } else if (table == (Map) TABLE_REDUCERS) {
            BinaryOperator<String>[] r = (BinaryOperator<String>[]) f;
            BinaryOperator<String> add = r[0], subtract = r[1];
            twin = new BinaryOperator[] {
                (BinaryOperator<String>) (a, v) -> { check(v); return add.apply(a, v); },
                (BinaryOperator<String>) (a, v) -> { check(v); return subtract.apply(a, v); }};
        } else {
            throw new IllegalArgumentException("no failing twins in this table");
        }
        return (T) twin;
    }

    /** A (key, value, aggregate) function's failing twin: checked on the value. */
    static Fn3 failingMiddle(Fn3 f) { return (k, v, a) -> { check(v); return f.apply(k, v, a); }; }

    /** The store type of the scenario being built: Materialized.withStoreType(IN_MEMORY) for
     *  every store it materializes when its "store_type" is "in_memory". One scenario is built at
     *  a time (main's loop), so a field serves. */
    static boolean inMemory;
    /** grouped_names: each grouping named "<store of its step>-grouped" (Grouped.as). */
    static boolean groupedNames;
    /** join_names: each stream join named "<store of its step>-joined" (StreamJoined/Joined.withName). */
    static boolean joinNames;

    /** node_names: sources "read-<topic>" (Consumed.as), the sink "write-output" (Produced.as),
     *  table joins, global joins and cogroup aggregations "<store of the step>-tjoin", "-gjoin",
     *  "-cogrouped" (Named, TableJoined.as). */
    static boolean nodeNames;

    static Consumed consumed(String topic) {
        Consumed c = Consumed.with(STRING, STRING);
        return nodeNames ? c.withName("read-" + topic) : c;
    }

    /** The step's node name (node_names), else null (Kafka generates it). */
    static Named node(String name) {
        return nodeNames ? Named.as(name) : null;
    }

    static Grouped groupedAs(String name) {
        Grouped g = Grouped.with(STRING, STRING);
        return groupedNames ? g.withName(name + "-grouped") : g;
    }
    /** unnamed_stores: every Materialized without a name; the names they would have had (their
     *  stores' contents are not compared). One scenario is built at a time, as inMemory. */
    static boolean unnamed;
    static final java.util.Set<String> unnamedNames = new java.util.HashSet<>();

    static Materialized named(String name) {
        if (!unnamed) return Materialized.as(name);
        unnamedNames.add(name);
        return Materialized.with(null, null);
    }

    static Materialized mat(String name, String type) {
        Materialized m = named(name).withKeySerde(STRING).withValueSerde(serde(type));
        return inMemory ? m.withStoreType(Materialized.StoreType.IN_MEMORY) : m;
    }

    /** A table operation's store: String values; String keys, or a windowed table's keys in the
     *  output's windowed serde (given: Kafka's windowed table passes no key serde on, and the
     *  default one cannot serialize a Windowed key). */
    static Materialized tableMat(String name, Built built) {
        if (built.windows == null) return mat(name, "string");
        Materialized m = named(name).withKeySerde(outputKeySerde(built)).withValueSerde(STRING);
        return inMemory ? m.withStoreType(Materialized.StoreType.IN_MEMORY) : m;
    }

    /** The key a named function is given: a windowed table's record key without its window. */
    static String plainKey(Object key) {
        return key instanceof Windowed ? (String) ((Windowed) key).key() : (String) key;
    }

    /** What building a scenario yields besides the topology: output serdes and the stores to read. */
    static final class Built {
        String valueType = "string";
        JsonNode windows;  // the spec of the output's windowed key, if any
        final List<String[]> stores = new ArrayList<>();  // {name, kind: kv | window | session}
    }

    /** vocabulary.py's PROCESSORS: counts each key's records in a key-value store (String to
     *  Long) and forwards the value with the count ("running_count"), or forwards records as they
     *  are and, every 200 ms of stream time, each key's count ("punctuated_tally"); a record
     *  without a key goes on as it is, uncounted. */
    static final class Counting implements Processor<String, String, String, String> {
        final String storeName;
        final boolean tally;
        ProcessorContext<String, String> context;
        KeyValueStore<String, Long> store;

        Counting(String storeName, boolean tally) { this.storeName = storeName; this.tally = tally; }

        @Override public void init(ProcessorContext<String, String> context) {
            this.context = context;
            store = context.getStateStore(storeName);
            if (tally) context.schedule(Duration.ofMillis(200), PunctuationType.STREAM_TIME, this::punctuate);
        }

        void punctuate(long timestamp) {
            try (KeyValueIterator<String, Long> it = store.all()) {
                while (it.hasNext()) {
                    KeyValue<String, Long> kv = it.next();
                    context.forward(new Record<>(kv.key, kv.key + "=" + kv.value, timestamp));
                }
            }
        }

        @Override public void process(Record<String, String> record) {
            if (record.key() == null) { context.forward(record); return; }
            Long n = store.get(record.key());
            long count = (n == null ? 0 : n) + 1;
            store.put(record.key(), count);
            context.forward(tally ? record : record.withValue((record.value() == null ? "null" : record.value()) + "#" + count));
        }
    }

    /** Counting's running_count as a fixed-key processor (KStream.processValues). */
    static final class CountingValues implements FixedKeyProcessor<String, String, String> {
        final String storeName;
        FixedKeyProcessorContext<String, String> context;
        KeyValueStore<String, Long> store;

        CountingValues(String storeName) { this.storeName = storeName; }

        @Override public void init(FixedKeyProcessorContext<String, String> context) {
            this.context = context;
            store = context.getStateStore(storeName);
        }

        @Override public void process(FixedKeyRecord<String, String> record) {
            if (record.key() == null) { context.forward(record); return; }
            Long n = store.get(record.key());
            long count = (n == null ? 0 : n) + 1;
            store.put(record.key(), count);
            context.forward(record.withValue((record.value() == null ? "null" : record.value()) + "#" + count));
        }
    }

    static KStream process(StreamsBuilder builder, KStream stream, JsonNode step, String name, Built built) {
        String fn = step.get("fn").asText();
        if (!fn.equals("running_count") && !fn.equals("punctuated_tally")) throw new IllegalArgumentException("no processor " + fn);
        StoreBuilder<KeyValueStore<String, Long>> store = Stores.keyValueStoreBuilder(
            inMemory ? Stores.inMemoryKeyValueStore(name) : Stores.persistentKeyValueStore(name), STRING, LONG);
        builder.addStateStore(step.get("cached").asBoolean() ? store.withCachingEnabled() : store);
        built.stores.add(new String[] {name, "plain_kv"});
        boolean tally = fn.equals("punctuated_tally");
        if (step.has("values") && step.get("values").asBoolean()) {
            if (tally) throw new IllegalArgumentException("no fixed-key processor " + fn);
            return named(step) == null ? stream.processValues(() -> new CountingValues(name), name)
                : stream.processValues(() -> new CountingValues(name), named(step), name);
        }
        return named(step) == null ? stream.process(() -> new Counting(name, tally), name)
            : stream.process(() -> new Counting(name, tally), named(step), name);
    }

    /** The step's Named ("name": the scenario names some steps), else the generated name's. */
    static Named named(JsonNode step) {
        JsonNode name = step.get("name");
        return name == null || name.isNull() ? null : Named.as(name.asText());
    }

    static KStream streamStep(StreamsBuilder builder, KStream stream, JsonNode step, int index, KStream[] input2) {
        String op = step.get("op").asText();
        Named n = named(step);
        switch (op) {
            case "filter": { BiFunction<String, String, Boolean> p = fn(PREDICATES, step, "fn");
                Predicate<Object, Object> q = (k, v) -> p.apply((String) k, (String) v);
                return n == null ? stream.filter(q) : stream.filter(q, n); }
            case "filter_not": { BiFunction<String, String, Boolean> p = fn(PREDICATES, step, "fn");
                Predicate<Object, Object> q = (k, v) -> p.apply((String) k, (String) v);
                return n == null ? stream.filterNot(q) : stream.filterNot(q, n); }
            case "select_key": { BiFunction<String, String, String> f = fn(KEY_SELECTORS, step, "fn");
                KeyValueMapper<Object, Object, Object> m = (k, v) -> f.apply((String) k, (String) v);
                return n == null ? stream.selectKey(m) : stream.selectKey(m, n); }
            case "map_values": { Function<String, String> f = fn(VALUE_MAPPERS, step, "fn");
                ValueMapper<Object, Object> m = v -> f.apply((String) v);
                return n == null ? stream.mapValues(m) : stream.mapValues(m, n); }
            case "flat_map_values": { Function<String, List<String>> f = fn(VALUE_SPLITTERS, step, "fn");
                ValueMapper<Object, Iterable<Object>> m = v -> (Iterable) f.apply((String) v);
                return n == null ? stream.flatMapValues(m) : stream.flatMapValues(m, n); }
            case "map": { BiFunction<String, String, KeyValue<String, String>> f = fn(KV_MAPPERS, step, "fn");
                KeyValueMapper<Object, Object, KeyValue<Object, Object>> m = (k, v) -> (KeyValue) f.apply((String) k, (String) v);
                return n == null ? stream.map(m) : stream.map(m, n); }
            case "flat_map": { BiFunction<String, String, List<KeyValue<String, String>>> f = fn(KV_SPLITTERS, step, "fn");
                KeyValueMapper<Object, Object, Iterable<KeyValue<Object, Object>>> m = (k, v) -> (Iterable) f.apply((String) k, (String) v);
                return n == null ? stream.flatMap(m) : stream.flatMap(m, n); }
            case "merge":  // input2 is read once, merged as often as asked
                if (input2[0] == null) input2[0] = builder.stream("input2", consumed("input2"));
                return n == null ? stream.merge(input2[0]) : stream.merge(input2[0], n);
            case "split": {
                BiFunction<String, String, Boolean> p = fn(PREDICATES, step, "fn");
                Map<String, KStream> branches = stream.split(Named.as("split" + index + "-"))
                    .branch((k, v) -> p.apply((String) k, (String) v), Branched.as("x"))
                    .defaultBranch(Branched.as("y"));
                Function<String, String> exclaim = VALUE_MAPPERS.get("exclaim");
                return branches.get("split" + index + "-x").merge(branches.get("split" + index + "-y").mapValues(v -> exclaim.apply((String) v)));
            }
            case "split_with_functions": {
                BiFunction<String, String, Boolean> p = fn(PREDICATES, step, "fn");
                Function<String, String> upper = VALUE_MAPPERS.get("upper");
                BiFunction<String, String, Boolean> isShort = PREDICATES.get("value_is_short");
                String name = "split" + index + "-";
                Map<String, KStream> branches = stream.split(Named.as(name))
                    .branch((k, v) -> p.apply((String) k, (String) v),
                        Branched.withFunction(s -> s.mapValues(v -> upper.apply((String) v))))
                    .defaultBranch(Branched.withFunction(s -> s.filterNot((k, v) -> isShort.apply((String) k, (String) v)), "y"));
                return branches.get(name + "1").merge(branches.get(name + "y"));
            }
            case "repartition": return stream.repartition(Repartitioned.with(STRING, STRING));
            default: throw new IllegalArgumentException("operation " + op + " is not a stream operation");
        }
    }

    static Object windowsOf(JsonNode spec) {
        String type = spec.get("type").asText();
        JsonNode grace = spec.get("grace");
        boolean noGrace = grace == null || grace.isNull();
        if (type.equals("session")) {
            Duration gap = Duration.ofMillis(spec.get("gap").asLong());
            return noGrace ? SessionWindows.ofInactivityGapWithNoGrace(gap)
                : SessionWindows.ofInactivityGapAndGrace(gap, Duration.ofMillis(grace.asLong()));
        }
        Duration size = Duration.ofMillis(spec.get("size").asLong());
        if (type.equals("sliding")) {
            return noGrace ? SlidingWindows.ofTimeDifferenceWithNoGrace(size)
                : SlidingWindows.ofTimeDifferenceAndGrace(size, Duration.ofMillis(grace.asLong()));
        }
        TimeWindows windows = noGrace ? TimeWindows.ofSizeWithNoGrace(size)
            : TimeWindows.ofSizeAndGrace(size, Duration.ofMillis(grace.asLong()));
        long advance = spec.get("advance").asLong();
        return advance == size.toMillis() ? windows : windows.advanceBy(Duration.ofMillis(advance));
    }

    static KTable windowed(KGroupedStream grouped, JsonNode step, String name, Built built) {
        JsonNode spec = step.get("windows");
        String agg = step.get("agg").asText();
        boolean onClose = step.get("emit").asText().equals("close");
        boolean session = spec.get("type").asText().equals("session");
        Object windows = windowsOf(spec);
        Named n = named(step);
        KTable table;
        String type;
        if (session) {
            SessionWindowedKStream w = grouped.windowedBy((SessionWindows) windows);
            if (onClose) w = w.emitStrategy(EmitStrategy.onWindowClose());
            if (agg.equals("count")) { type = "long"; table = n == null ? w.count(mat(name, type)) : w.count(n, mat(name, type)); }
            else if (agg.equals("reduce")) { type = "string"; BinaryOperator<String> r = fn(REDUCERS, step, "fn");
                Reducer<Object> red = (a, v) -> r.apply((String) a, (String) v);
                table = n == null ? w.reduce(red, mat(name, type)) : w.reduce(red, n, mat(name, type)); }
            else { Agg a = fn(AGGREGATORS, step, "fn"); type = a.type();
                Aggregator<Object, Object, Object> add = (k, v, x) -> a.add().apply(k, v, x);
                org.apache.kafka.streams.kstream.Merger<Object, Object> merge = (k, x, y) -> a.merge().apply(k, x, y);
                table = n == null ? w.aggregate(a.init()::get, add, merge, mat(name, type))
                    : w.aggregate(a.init()::get, add, merge, n, mat(name, type)); }
        } else {
            TimeWindowedKStream w = windows instanceof SlidingWindows
                ? grouped.windowedBy((SlidingWindows) windows) : grouped.windowedBy((TimeWindows) windows);
            if (onClose) w = w.emitStrategy(EmitStrategy.onWindowClose());
            if (agg.equals("count")) { type = "long"; table = n == null ? w.count(mat(name, type)) : w.count(n, mat(name, type)); }
            else if (agg.equals("reduce")) { type = "string"; BinaryOperator<String> r = fn(REDUCERS, step, "fn");
                Reducer<Object> red = (a, v) -> r.apply((String) a, (String) v);
                table = n == null ? w.reduce(red, mat(name, type)) : w.reduce(red, n, mat(name, type)); }
            else { Agg a = fn(AGGREGATORS, step, "fn"); type = a.type();
                Aggregator<Object, Object, Object> add = (k, v, x) -> a.add().apply(k, v, x);
                table = n == null ? w.aggregate(a.init()::get, add, mat(name, type))
                    : w.aggregate(a.init()::get, add, n, mat(name, type)); }
        }
        built.valueType = type;
        built.windows = spec;
        built.stores.add(new String[] {name, session ? "session" : "window"});
        return table;
    }

    static KGroupedStream grouping(KStream stream, JsonNode step, String name) {
        if (step.get("op").asText().equals("group_by_key")) return stream.groupByKey(groupedAs(name));
        BiFunction<String, String, String> f = fn(KEY_SELECTORS, step, "fn");
        return stream.groupBy((k, v) -> f.apply((String) k, (String) v), groupedAs(name));
    }

    static KTable cogroup(StreamsBuilder builder, KGroupedStream grouped, JsonNode step, String name, Built built,
                          KStream[] input2) {
        CoAgg a = fn(COGROUP_AGGREGATORS, step, "fn");
        if (input2[0] == null) input2[0] = builder.stream("input2", consumed("input2"));
        KStream other = input2[0];
        JsonNode ops = step.get("other").get("ops");
        for (int i = 0; i < ops.size() - 1; i++) other = streamStep(builder, other, ops.get(i), 100 + i, input2);
        KGroupedStream otherGrouped = grouping(other, ops.get(ops.size() - 1), name + "-other");
        CogroupedKStream cogrouped = grouped.cogroup((k, v, x) -> a.first().apply(k, v, x))
            .cogroup(otherGrouped, (k, v, x) -> a.second().apply(k, v, x));
        built.valueType = a.type();
        JsonNode spec = step.get("windows");
        if (spec == null || spec.isNull()) {
            built.stores.add(new String[] {name, "kv"});
            Named c = node(name + "-cogrouped");
            return c == null ? cogrouped.aggregate(a.init()::get, mat(name, a.type()))
                : cogrouped.aggregate(a.init()::get, c, mat(name, a.type()));
        }
        built.windows = spec;
        Object windows = windowsOf(spec);
        if (windows instanceof SessionWindows) {
            built.stores.add(new String[] {name, "session"});
            SessionWindowedCogroupedKStream w = cogrouped.windowedBy((SessionWindows) windows);
            Named c = node(name + "-cogrouped");
            return c == null ? w.aggregate(a.init()::get, (k, x, y) -> a.merge().apply(k, x, y), mat(name, a.type()))
                : w.aggregate(a.init()::get, (k, x, y) -> a.merge().apply(k, x, y), c, mat(name, a.type()));
        }
        built.stores.add(new String[] {name, "window"});
        TimeWindowedCogroupedKStream w = windows instanceof SlidingWindows
            ? cogrouped.windowedBy((SlidingWindows) windows) : cogrouped.windowedBy((TimeWindows) windows);
        Named c = node(name + "-cogrouped");
        return c == null ? w.aggregate(a.init()::get, mat(name, a.type())) : w.aggregate(a.init()::get, c, mat(name, a.type()));
    }

    static KTable tableAggregate(KTable table, JsonNode step, String name, Built built) {
        BiFunction<String, String, KeyValue<String, String>> by = fn(KV_MAPPERS, step, "by");
        KGroupedTable grouped = table.groupBy((k, v) -> by.apply((String) k, (String) v), groupedAs(name));
        String agg = step.get("agg").asText();
        Named n = named(step);
        KTable result;
        if (agg.equals("count")) {
            built.valueType = "long";
            result = n == null ? grouped.count(mat(name, "long")) : grouped.count(n, mat(name, "long"));
        } else if (agg.equals("reduce")) {
            BinaryOperator<String>[] r = fn(TABLE_REDUCERS, step, "fn");
            built.valueType = "string";
            Reducer<Object> add = (a, v) -> r[0].apply((String) a, (String) v);
            Reducer<Object> sub = (a, v) -> r[1].apply((String) a, (String) v);
            result = n == null ? grouped.reduce(add, sub, mat(name, "string")) : grouped.reduce(add, sub, n, mat(name, "string"));
        } else {
            TableAgg a = fn(TABLE_AGGREGATORS, step, "fn");
            built.valueType = a.type();
            Aggregator<Object, Object, Object> add = (k, v, x) -> a.add().apply(k, v, x);
            Aggregator<Object, Object, Object> sub = (k, v, x) -> a.subtract().apply(k, v, x);
            result = n == null ? grouped.aggregate(a.init()::get, add, sub, mat(name, a.type()))
                : grouped.aggregate(a.init()::get, add, sub, n, mat(name, a.type()));
        }
        built.stores.add(new String[] {name, "kv"});
        return result;
    }

    static Suppressed suppressed(JsonNode step) {
        if (step.get("until").asText().equals("window_close")) {
            return Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded());
        }
        JsonNode n = step.get("max_records");
        JsonNode size = step.get("max_bytes");
        boolean records = n != null && !n.isNull();
        boolean bytes = size != null && !size.isNull();
        Suppressed.BufferConfig buffer = !records && !bytes ? Suppressed.BufferConfig.unbounded()
            : records ? Suppressed.BufferConfig.maxRecords(n.asLong()) : Suppressed.BufferConfig.maxBytes(size.asLong());
        if (records && bytes) buffer = buffer.withMaxBytes(size.asLong());
        return Suppressed.untilTimeLimit(Duration.ofMillis(step.get("limit").asLong()), buffer);
    }

    static JoinWindows joinWindows(JsonNode spec) {
        JsonNode grace = spec.get("grace");
        Duration diff = Duration.ofMillis(spec.get("diff").asLong());
        JoinWindows windows = grace == null || grace.isNull() ? JoinWindows.ofTimeDifferenceWithNoGrace(diff)
            : JoinWindows.ofTimeDifferenceAndGrace(diff, Duration.ofMillis(grace.asLong()));
        if (!spec.get("before").isNull()) windows = windows.before(Duration.ofMillis(spec.get("before").asLong()));
        if (!spec.get("after").isNull()) windows = windows.after(Duration.ofMillis(spec.get("after").asLong()));
        return windows;
    }

    /** The window stores StreamJoined.withStoreName(name) names (vocabulary.join_window_stores). */
    static String[] joinWindowStores(String type, String name) {
        return new String[] {name + (type.equals("outer") ? "-outer-this-join" : "-this-join") + "-store",
            name + (type.equals("inner") ? "-other-join" : "-outer-other-join") + "-store"};
    }

    static Object join(StreamsBuilder builder, Object current, JsonNode step, String name, String prefix, Built built,
                       KStream[] input2) {
        String kind = step.get("op").asText();
        String type = step.get("type").asText();
        BinaryOperator<String> j = fn(JOINERS, step, "joiner");
        org.apache.kafka.streams.kstream.ValueJoiner joiner = (l, r) -> j.apply((String) l, (String) r);
        boolean stored = step.has("store") && step.get("store").asBoolean();
        if (kind.equals("global_join")) {
            // named even under unnamed_stores: Kafka 4.1 fails to build a global table from a
            // Materialized without a name ("suppliers with exactly one store but got 0")
            Materialized global = Materialized.as("global-store").withKeySerde(STRING).withValueSerde(STRING);
            GlobalKTable table = stored ? builder.globalTable("global", consumed("global"),
                                                             inMemory ? global.withStoreType(Materialized.StoreType.IN_MEMORY) : global)
                : builder.globalTable("global", consumed("global"));
            if (stored) built.stores.add(new String[] {"global-store", "kv"});
            BiFunction<String, String, String> f = fn(KEY_SELECTORS, step, "key_selector");
            KeyValueMapper selector = (k, v) -> f.apply((String) k, (String) v);
            Named g = node(name + "-gjoin");
            if (g != null) {
                return type.equals("left") ? ((KStream) current).leftJoin(table, selector, joiner, g)
                    : ((KStream) current).join(table, selector, joiner, g);
            }
            return type.equals("left") ? ((KStream) current).leftJoin(table, selector, joiner)
                : ((KStream) current).join(table, selector, joiner);
        }
        JsonNode side = step.get("other");
        boolean self = side.get("source").asText().equals("self");
        String topic = side.has("topic") ? side.get("topic").asText() : "right";
        Object other = pipeline(builder, topic, side, (self ? prefix + "self" : topic) + "-", built, input2, current);
        if (kind.equals("stream_join")) {
            StreamJoined joined = StreamJoined.with(STRING, STRING, STRING);
            if (joinNames) joined = joined.withName(name + "-joined");
            if (stored) {
                joined = joined.withStoreName(name);
                for (String store : joinWindowStores(type, name)) built.stores.add(new String[] {store, "join_window"});
            }
            JoinWindows windows = joinWindows(step.get("windows"));
            KStream left = (KStream) current;
            KStream right = (KStream) other;
            if (type.equals("inner")) return left.join(right, joiner, windows, joined);
            if (type.equals("left")) return left.leftJoin(right, joiner, windows, joined);
            return left.outerJoin(right, joiner, windows, joined);
        }
        if (kind.equals("stream_table_join")) {
            Joined joined = Joined.with(STRING, STRING, STRING);
            if (joinNames) joined = joined.withName(name + "-joined");
            return type.equals("left") ? ((KStream) current).leftJoin((KTable) other, joiner, joined)
                : ((KStream) current).join((KTable) other, joiner, joined);
        }
        KTable left = (KTable) current;
        KTable right = (KTable) other;
        Materialized m = stored ? mat(name, "string") : null;
        if (stored) built.stores.add(new String[] {name, "kv"});
        Named t = node(name + "-tjoin");
        if (kind.equals("fk_join")) {
            Function<String, String> f = fn(FK_EXTRACTORS, step, "extractor");
            Function extractor = v -> f.apply((String) v);
            if (t != null) {
                TableJoined tj = TableJoined.as(name + "-tjoin");
                if (type.equals("left")) return m == null ? left.leftJoin(right, extractor, joiner, tj) : left.leftJoin(right, extractor, joiner, tj, m);
                return m == null ? left.join(right, extractor, joiner, tj) : left.join(right, extractor, joiner, tj, m);
            }
            if (type.equals("left")) return m == null ? left.leftJoin(right, extractor, joiner) : left.leftJoin(right, extractor, joiner, m);
            return m == null ? left.join(right, extractor, joiner) : left.join(right, extractor, joiner, m);
        }
        if (t != null) {
            if (type.equals("inner")) return m == null ? left.join(right, joiner, t) : left.join(right, joiner, t, m);
            if (type.equals("left")) return m == null ? left.leftJoin(right, joiner, t) : left.leftJoin(right, joiner, t, m);
            return m == null ? left.outerJoin(right, joiner, t) : left.outerJoin(right, joiner, t, m);
        }
        if (type.equals("inner")) return m == null ? left.join(right, joiner) : left.join(right, joiner, m);
        if (type.equals("left")) return m == null ? left.leftJoin(right, joiner) : left.leftJoin(right, joiner, m);
        return m == null ? left.outerJoin(right, joiner) : left.outerJoin(right, joiner, m);
    }

    static Object build(StreamsBuilder builder, JsonNode scenario, Built built) {
        Object current = pipeline(builder, "input", scenario, "", built, new KStream[] {null}, null);
        return current instanceof KTable ? ((KTable) current).toStream() : current;
    }

    /** spec's source over topic (self: the given stream or table) and its ops (stores named with
     *  prefix): a KStream or a KTable. */
    static Object pipeline(StreamsBuilder builder, String topic, JsonNode spec, String prefix, Built built, KStream[] input2,
                           Object self) {
        Object current;
        if (spec.get("source").asText().equals("self")) {
            current = self;
        } else if (spec.get("source").asText().equals("table")) {
            JsonNode named = spec.get("source_store");
            if (named == null || named.asBoolean()) {
                current = builder.table(topic, consumed(topic), mat(prefix + "source-store", "string"));
                built.stores.add(new String[] {prefix + "source-store", "kv"});
            } else {
                current = builder.table(topic, consumed(topic));
            }
        } else {
            current = builder.stream(topic, consumed(topic));
        }
        int index = -1;
        for (JsonNode step : spec.get("ops")) {
            String op = step.get("op").asText();
            String name = prefix + "store-" + ++index;
            switch (op) {
                case "stream_join": case "stream_table_join": case "global_join": case "table_join": case "fk_join":
                    current = join(builder, current, step, name, prefix, built, input2); break;
                case "filter": case "filter_not": case "select_key": case "map_values": case "flat_map_values":
                case "map": case "flat_map": case "merge": case "split": case "split_with_functions": case "repartition":
                    current = streamStep(builder, (KStream) current, step, index, input2); break;
                case "process": current = process(builder, (KStream) current, step, name, built); break;
                case "group_by": case "group_by_key":
                    current = grouping((KStream) current, step, name); break;
                case "cogroup":
                    current = cogroup(builder, (KGroupedStream) current, step, name, built, input2); break;
                case "count": {
                    built.valueType = "long";
                    Named n = named(step);
                    current = n == null ? ((KGroupedStream) current).count(mat(name, "long"))
                        : ((KGroupedStream) current).count(n, mat(name, "long"));
                    built.stores.add(new String[] {name, "kv"}); break; }
                case "reduce": { BinaryOperator<String> r = fn(REDUCERS, step, "fn");
                    Reducer<Object> red = (a, v) -> r.apply((String) a, (String) v);
                    Named n = named(step);
                    current = n == null ? ((KGroupedStream) current).reduce(red, mat(name, "string"))
                        : ((KGroupedStream) current).reduce(red, n, mat(name, "string"));
                    built.stores.add(new String[] {name, "kv"}); break; }
                case "aggregate": { Agg a = fn(AGGREGATORS, step, "fn");
                    built.valueType = a.type();
                    Aggregator<Object, Object, Object> add = (k, v, x) -> a.add().apply(k, v, x);
                    Named n = named(step);
                    current = n == null ? ((KGroupedStream) current).aggregate(a.init()::get, add, mat(name, a.type()))
                        : ((KGroupedStream) current).aggregate(a.init()::get, add, n, mat(name, a.type()));
                    built.stores.add(new String[] {name, "kv"}); break; }
                case "windowed":
                    current = windowed((KGroupedStream) current, step, name, built); break;
                case "to_table":
                    current = joinNames ? ((KStream) current).toTable(Named.as(name + "-totable"), mat(name, "string"))
                        : ((KStream) current).toTable(mat(name, "string"));
                    built.stores.add(new String[] {name, "kv"}); break;
                case "table_filter": case "table_filter_not": {
                    BiFunction<String, String, Boolean> p = fn(PREDICATES, step, "fn");
                    org.apache.kafka.streams.kstream.Predicate pred = (k, v) -> p.apply(plainKey(k), (String) v);
                    KTable t = (KTable) current;
                    boolean not = op.equals("table_filter_not");
                    Named n = named(step);
                    if (step.get("store").asBoolean()) {
                        current = n == null ? (not ? t.filterNot(pred, tableMat(name, built)) : t.filter(pred, tableMat(name, built)))
                            : (not ? t.filterNot(pred, n, tableMat(name, built)) : t.filter(pred, n, tableMat(name, built)));
                        built.stores.add(new String[] {name, "kv"});
                    } else {
                        current = n == null ? (not ? t.filterNot(pred) : t.filter(pred))
                            : (not ? t.filterNot(pred, n) : t.filter(pred, n));
                    }
                    break;
                }
                case "table_map_values": {
                    Function<String, String> f = fn(VALUE_MAPPERS, step, "fn");
                    org.apache.kafka.streams.kstream.ValueMapper m = v -> f.apply((String) v);
                    Named n = named(step);
                    if (step.get("store").asBoolean()) {
                        current = n == null ? ((KTable) current).mapValues(m, tableMat(name, built))
                            : ((KTable) current).mapValues(m, n, tableMat(name, built));
                        built.stores.add(new String[] {name, "kv"});
                    } else {
                        current = n == null ? ((KTable) current).mapValues(m) : ((KTable) current).mapValues(m, n);
                    }
                    break;
                }
                case "table_transform_values": {  // a tombstone's null becomes "~"
                    Function<String, String> f = fn(VALUE_MAPPERS, step, "fn");
                    ValueTransformerWithKeySupplier<Object, Object, Object> s = () -> new ValueTransformerWithKey<>() {
                        @Override public void init(org.apache.kafka.streams.processor.ProcessorContext context) { }
                        @Override public Object transform(Object k, Object v) { return v == null ? "~" : f.apply((String) v); }
                        @Override public void close() { }
                    };
                    Named n = named(step);
                    if (step.get("store").asBoolean()) {
                        current = n == null ? ((KTable) current).transformValues(s, tableMat(name, built))
                            : ((KTable) current).transformValues(s, tableMat(name, built), n);
                        built.stores.add(new String[] {name, "kv"});
                    } else {
                        current = n == null ? ((KTable) current).transformValues(s) : ((KTable) current).transformValues(s, n);
                    }
                    break;
                }
                case "table_aggregate":
                    current = tableAggregate((KTable) current, step, name, built); break;
                case "suppress":
                    current = ((KTable) current).suppress(suppressed(step)); break;
                case "to_stream":
                    current = named(step) == null ? ((KTable) current).toStream() : ((KTable) current).toStream(named(step));
                    break;
                default: throw new IllegalArgumentException("operation " + op + " is not in the vocabulary");
            }
        }
        return current;
    }

    static Serde outputKeySerde(Built built) {
        if (built.windows == null) return STRING;
        if (built.windows.get("type").asText().equals("session")) return WindowedSerdes.sessionWindowedSerdeFrom(String.class);
        return WindowedSerdes.timeWindowedSerdeFrom(String.class, built.windows.get("size").asLong());
    }

    static void addKey(ArrayNode row, Object key) {
        if (key instanceof Windowed) {
            Windowed w = (Windowed) key;
            row.addArray().add((String) w.key()).add(w.window().start()).add(w.window().end());
        } else {
            row.add((String) key);
        }
    }

    static void addValue(ArrayNode row, Object value) {
        if (value == null) row.addNull();
        else if (value instanceof Long) row.add((Long) value);
        else row.add((String) value);
    }

    static String text(JsonNode node) { return node.isNull() ? null : node.asText(); }

    /** vocabulary.py's store reads: each of the scenario's "reads" that applies to the store's
     *  kind (see vocabulary.read_kinds), its results in the order the store gives them. */
    static ArrayNode storeReads(TopologyTestDriver driver, ObjectMapper json, JsonNode scenario, String name,
                                String kind) {
        ArrayNode results = json.createArrayNode();
        boolean windowedKeys = scenario.path("windowed_keys").asBoolean(false);
        for (JsonNode read : scenario.path("reads")) {
            String op = read.get(0).asText();
            String family = op.substring(0, op.indexOf(':'));
            op = op.substring(op.indexOf(':') + 1);
            boolean applies = family.equals("kv") ? (kind.equals("plain_kv") || (kind.equals("kv") && !windowedKeys))
                : family.equals("window") ? (kind.equals("window") || (kind.equals("join_window") && !op.equals("fetch_one")))
                : kind.equals("session");
            if (!applies) continue;
            try {
                results.add(storeRead(driver, json, name, family, op, read));
            } catch (RuntimeException e) {  // a read Kafka Streams fails: named, not compared
                results.add("error: " + e);
            }
        }
        return results;
    }

    static ArrayNode storeRead(TopologyTestDriver driver, ObjectMapper json, String name, String family, String op,
                               JsonNode read) {
        ArrayNode rows = json.createArrayNode();
        KeyValueIterator it = null;
        if (family.equals("kv")) {
            org.apache.kafka.streams.state.KeyValueStore store = driver.getKeyValueStore(name);
            if (op.equals("range")) it = store.range(text(read.get(1)), text(read.get(2)));
            else if (op.equals("reverse_range")) it = store.reverseRange(text(read.get(1)), text(read.get(2)));
            else it = store.prefixScan(text(read.get(1)), new StringSerializer());
        } else if (family.equals("window")) {
            org.apache.kafka.streams.state.WindowStore store = driver.getWindowStore(name);
            java.util.function.LongFunction<java.time.Instant> at = java.time.Instant::ofEpochMilli;
            int n = read.size();
            java.time.Instant t0 = at.apply(read.get(n - 2).asLong()), t1 = at.apply(read.get(n - 1).asLong());
            switch (op) {
                case "fetch_one": addValue(rows, store.fetch(text(read.get(1)), read.get(2).asLong())); return rows;
                case "fetch": it = store.fetch(text(read.get(1)), t0, t1); break;
                case "backward_fetch": it = store.backwardFetch(text(read.get(1)), t0, t1); break;
                case "fetch_range": it = store.fetch(text(read.get(1)), text(read.get(2)), t0, t1); break;
                case "backward_fetch_range": it = store.backwardFetch(text(read.get(1)), text(read.get(2)), t0, t1); break;
                case "fetch_all": it = store.fetchAll(t0, t1); break;
                default: it = store.backwardFetchAll(t0, t1);
            }
        } else {
            org.apache.kafka.streams.state.SessionStore store = driver.getSessionStore(name);
            switch (op) {
                case "find_sessions": it = store.findSessions(text(read.get(1)), read.get(2).asLong(), read.get(3).asLong()); break;
                case "backward_find_sessions": it = store.backwardFindSessions(text(read.get(1)), read.get(2).asLong(), read.get(3).asLong()); break;
                case "find_sessions_range": it = store.findSessions(text(read.get(1)), text(read.get(2)), read.get(3).asLong(), read.get(4).asLong()); break;
                case "backward_find_sessions_range": it = store.backwardFindSessions(text(read.get(1)), text(read.get(2)), read.get(3).asLong(), read.get(4).asLong()); break;
                case "fetch": it = store.fetch(text(read.get(1))); break;
                case "backward_fetch": it = store.backwardFetch(text(read.get(1))); break;
                case "fetch_range": it = store.fetch(text(read.get(1)), text(read.get(2))); break;
                default: it = store.backwardFetch(text(read.get(1)), text(read.get(2)));
            }
        }
        try {
            while (it.hasNext()) {
                KeyValue kv = (KeyValue) it.next();
                ArrayNode row = rows.addArray();
                if (kv.key instanceof Long) row.add((Long) kv.key);  // a window fetch of one key: its start
                else addKey(row, kv.key);
                addValue(row, kv.value instanceof ValueAndTimestamp ? ((ValueAndTimestamp) kv.value).value() : kv.value);
            }
        } finally {
            it.close();
        }
        return rows;
    }

    static ArrayNode storeRows(TopologyTestDriver driver, ObjectMapper json, String name, String kind) {
        ArrayNode rows = json.createArrayNode();
        KeyValueIterator it;
        if (kind.equals("kv")) it = driver.getTimestampedKeyValueStore(name).all();
        else if (kind.equals("plain_kv")) it = driver.getKeyValueStore(name).all();
        else if (kind.equals("window")) it = driver.getTimestampedWindowStore(name).all();
        else if (kind.equals("join_window")) it = driver.getWindowStore(name).all();
        else it = driver.getSessionStore(name).findSessions(null, null, 0L, Long.MAX_VALUE);
        try {
            while (it.hasNext()) {
                KeyValue kv = (KeyValue) it.next();
                ArrayNode row = rows.addArray();
                addKey(row, kv.key);
                if (kv.value instanceof ValueAndTimestamp) {
                    ValueAndTimestamp vat = (ValueAndTimestamp) kv.value;
                    addValue(row, vat.value());
                    row.add(vat.timestamp());
                } else {
                    addValue(row, kv.value);
                }
            }
        } finally {
            it.close();
        }
        return rows;
    }

    /** The scenario's topology, built by a builder with the scenario's config (dsl_store
     *  "builder": its default.dsl.store; ensureNames: ensure.explicit.internal.resource.naming). */
    static Topology buildScenario(JsonNode scenario, Built built, Properties props, String dslStore,
                                  boolean ensureNames) {
        Properties builderProps = new Properties();
        builderProps.putAll(props);
        if (dslStore.equals("builder")) builderProps.put(StreamsConfig.DEFAULT_DSL_STORE_CONFIG, StreamsConfig.IN_MEMORY);
        if (ensureNames) builderProps.put(StreamsConfig.ENSURE_EXPLICIT_INTERNAL_RESOURCE_NAMING_CONFIG, true);
        StreamsBuilder builder = dslStore.equals("builder") || ensureNames
            ? new StreamsBuilder(new TopologyConfig(new StreamsConfig(builderProps))) : new StreamsBuilder();
        KStream out = (KStream) build(builder, scenario, built);
        Serde keySerde = outputKeySerde(built);
        Serde valueSerde = serde(built.valueType);
        JsonNode extractor = scenario.get("output_extractor");
        Produced produced = Produced.with(keySerde, valueSerde);
        if (nodeNames) produced = produced.withName("write-output");
        if (extractor == null || extractor.isNull()) {
            out.to("output", produced);
        } else {
            BiFunction<Object, RecordContext, String> route = OUTPUT_EXTRACTORS.get(extractor.asText());
            if (route == null) throw new IllegalArgumentException("no output extractor " + extractor.asText());
            out.to((k, v, context) -> route.apply(v, context), produced);
        }
        return builder.build(props);
    }

    static ObjectNode run(ObjectMapper json, JsonNode scenario, String stateDir) {
        ObjectNode result = json.createObjectNode();
        result.put("seed", scenario.get("seed").asLong());
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "conformance");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
        // the driver checkpoints (fsync) after every record: a RAM-backed directory keeps that cheap
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir + "/" + scenario.get("seed").asLong());
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, scenario.get("cache_max_bytes").asText());
        // a suppress buffer after an unmaterialized table operation takes the default serdes
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        // as TopologyTestDriver sets it when absent (and Eddy's driver too): left/outer stream-stream
        // join results are emitted on the first record past the window close, not throttled
        props.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX, 0L);
        props.put(StreamsConfig.TOPOLOGY_OPTIMIZATION_CONFIG, scenario.path("topology_optimization").asText("none"));
        if ("log_and_continue".equals(scenario.path("processing_handler").asText()))
            props.put(StreamsConfig.PROCESSING_EXCEPTION_HANDLER_CLASS_CONFIG,
                      org.apache.kafka.streams.errors.LogAndContinueProcessingExceptionHandler.class);
        if ("log_and_fail".equals(scenario.path("processing_handler").asText()))
            props.put(StreamsConfig.PROCESSING_EXCEPTION_HANDLER_CLASS_CONFIG,
                      org.apache.kafka.streams.errors.LogAndFailProcessingExceptionHandler.class);
        Built built = new Built();
        inMemory = scenario.path("store_type").asText("").equals("in_memory");
        unnamed = scenario.path("unnamed_stores").asBoolean(false);
        groupedNames = scenario.path("grouped_names").asBoolean(false);
        joinNames = scenario.path("join_names").asBoolean(false);
        nodeNames = scenario.path("node_names").asBoolean(false);
        unnamedNames.clear();
        try {
            // dsl_store: the builder's default.dsl.store, or the app's dsl.store.suppliers.class
            String dslStore = scenario.path("dsl_store").asText("");
            if (dslStore.equals("app")) {
                props.put(StreamsConfig.DSL_STORE_SUPPLIERS_CLASS_CONFIG,
                          BuiltInDslStoreSuppliers.InMemoryDslStoreSuppliers.class);
            }
            Topology topology = buildScenario(scenario, built, props, dslStore, false);
            result.put("topology", topology.describe().toString());
            // the generated internal names (KIP-1111): the same topology built again by a builder
            // whose config ensures explicit naming; the exception's text, without its prefix
            String unnamedText = "";
            try {
                buildScenario(scenario, new Built(), props, dslStore, true);
            } catch (TopologyException e) {
                unnamedText = e.getMessage().replaceFirst("^Invalid topology: ", "");
            }
            result.put("unnamed_resources", unnamedText);
            JsonNode extractor = scenario.get("output_extractor");
            Serde keySerde = outputKeySerde(built);
            Serde valueSerde = serde(built.valueType);
            TopologyTestDriver driver = new TopologyTestDriver(topology, props);
            try {
                Map<String, TestInputTopic<String, String>> inputs = new HashMap<>();
                boolean withHeaders = scenario.path("headers").asBoolean(false);
                int index = 0;
                for (JsonNode r : scenario.get("records")) {
                    String topic = r.size() > 3 ? r.get(3).asText() : "input";
                    TestInputTopic<String, String> in = inputs.computeIfAbsent(topic,
                        t -> driver.createInputTopic(t, new StringSerializer(), new StringSerializer()));
                    String key = r.get(0).isNull() ? null : r.get(0).asText();
                    String value = r.get(1).isNull() ? null : r.get(1).asText();
                    RecordHeaders headers = new RecordHeaders();
                    if (withHeaders) headers.add("n", String.valueOf(index).getBytes(StandardCharsets.UTF_8));
                    try {
                        in.pipeInput(new TestRecord<>(key, value, headers, r.get(2).asLong()));
                    } catch (org.apache.kafka.streams.errors.StreamsException e) {
                        if (!"log_and_fail".equals(scenario.path("processing_handler").asText())) throw e;
                        result.put("failed_at", index);  // the task failed here: what came out before is compared
                        break;
                    }
                    index++;
                }
                ArrayNode output = result.putArray("output");
                // output2's rows (a topic name extractor's) after output's, tagged with the topic
                for (String topic : extractor == null || extractor.isNull() ? new String[] {"output"}
                                                                           : new String[] {"output", "output2"}) {
                    TestOutputTopic sink = driver.createOutputTopic(topic, keySerde.deserializer(), valueSerde.deserializer());
                    for (Object o : sink.readRecordsToList()) {
                        TestRecord r = (TestRecord) o;
                        ArrayNode row = output.addArray();
                        addKey(row, r.key());
                        addValue(row, r.value());
                        row.add(r.timestamp());
                        if (withHeaders) {
                            ArrayNode values = row.addArray();
                            for (Header h : r.headers().toArray()) {
                                if (h.value() == null) values.addNull();
                                else values.add(new String(h.value(), StandardCharsets.UTF_8));
                            }
                        }
                        if (!topic.equals("output")) row.add(topic);
                    }
                }
                ObjectNode stores = result.putObject("store");
                ObjectNode reads = result.putObject("reads");
                for (String[] store : built.stores) {
                    if (unnamedNames.contains(store[0]) || result.has("failed_at")) continue;
                    stores.set(store[0], storeRows(driver, json, store[0], store[1]));
                    reads.set(store[0], storeReads(driver, json, scenario, store[0], store[1]));
                }
            } finally {
                try {
                    driver.close();
                } catch (org.apache.kafka.streams.errors.StreamsException e) {
                    // under log_and_fail a failing function may first run in the close's flush
                    if (!"log_and_fail".equals(scenario.path("processing_handler").asText())) throw e;
                    if (!result.has("failed_at")) result.put("failed_at", "close");
                }
            }
            result.putNull("error");
        } catch (RuntimeException e) {
            result.put("error", e.toString());
        }
        return result;
    }

    /** args: scenarios.json state.dir; one result per line on stdout, as each scenario ends. */
    public static void main(String[] args) throws Exception {
        // stdout carries the results only: whatever else writes to System.out (a logger) goes to stderr
        java.io.PrintStream out = new java.io.PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, "UTF-8");
        System.setOut(System.err);
        ObjectMapper json = new ObjectMapper();
        JsonNode scenarios = json.readTree(new File(args[0]));
        for (JsonNode scenario : scenarios) {
            out.println(json.writeValueAsString(run(json, scenario, args[1])));
            out.flush();
        }
    }
}
