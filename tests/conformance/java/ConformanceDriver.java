import java.io.File;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.function.BiFunction;
import java.util.function.Function;
import java.util.stream.Collectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Runs conformance scenarios (tests/conformance/vocabulary.py) through Kafka Streams' own
 * TopologyTestDriver. args: scenarios.json results.json state.dir. Each result is
 * {"seed", "output": [[key, value, timestamp]...], "store": [[key, count]...] | null, "error": text | null}.
 * The named functions below are the twins of vocabulary.py's, name for name.
 */
public final class ConformanceDriver {
    static final Map<String, Function<String, String>> VALUE_MAPPERS = new HashMap<>();
    static final Map<String, Function<String, List<String>>> VALUE_SPLITTERS = new HashMap<>();
    static final Map<String, BiFunction<String, String, Boolean>> PREDICATES = new HashMap<>();
    static final Map<String, BiFunction<String, String, String>> KEY_SELECTORS = new HashMap<>();

    static {
        VALUE_MAPPERS.put("upper", v -> v == null ? null : v.toUpperCase());
        VALUE_MAPPERS.put("exclaim", v -> v == null ? null : v + "!");
        VALUE_MAPPERS.put("first_word", v -> v == null ? null : v.split(" ", -1)[0]);
        VALUE_MAPPERS.put("drop_to_null", v -> v == null || v.startsWith("b") ? null : v);
        VALUE_SPLITTERS.put("words", v -> v == null ? new ArrayList<>()
            : Arrays.stream(v.split(" ")).filter(w -> !w.isEmpty()).collect(Collectors.toList()));
        VALUE_SPLITTERS.put("twice", v -> Arrays.asList(v, v));
        PREDICATES.put("value_has_a", (k, v) -> v != null && v.contains("a"));
        PREDICATES.put("value_is_short", (k, v) -> v != null && v.length() <= 3);
        PREDICATES.put("key_present", (k, v) -> k != null);
        KEY_SELECTORS.put("value", (k, v) -> v);
        KEY_SELECTORS.put("first_char", (k, v) -> v == null || v.isEmpty() ? null : v.substring(0, 1));
        KEY_SELECTORS.put("key_upper", (k, v) -> k == null ? null : k.toUpperCase());
    }

    static <T> T fn(Map<String, T> table, JsonNode step) {
        T f = table.get(step.get("fn").asText());
        if (f == null) throw new IllegalArgumentException("unknown function " + step);
        return f;
    }

    static ObjectNode run(ObjectMapper json, JsonNode scenario, String stateDir) {
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> stream = builder.stream("input", Consumed.with(Serdes.String(), Serdes.String()));
        KGroupedStream<String, String> grouped = null;
        boolean counted = false;
        for (JsonNode step : scenario.get("ops")) {
            String op = step.get("op").asText();
            switch (op) {
                case "filter": { BiFunction<String, String, Boolean> p = fn(PREDICATES, step); stream = stream.filter(p::apply); break; }
                case "filter_not": { BiFunction<String, String, Boolean> p = fn(PREDICATES, step); stream = stream.filterNot(p::apply); break; }
                case "map_values": { Function<String, String> m = fn(VALUE_MAPPERS, step); stream = stream.mapValues(m::apply); break; }
                case "flat_map_values": { Function<String, List<String>> m = fn(VALUE_SPLITTERS, step); stream = stream.flatMapValues(m::apply); break; }
                case "select_key": { BiFunction<String, String, String> s = fn(KEY_SELECTORS, step); stream = stream.selectKey(s::apply); break; }
                case "group_by": { BiFunction<String, String, String> s = fn(KEY_SELECTORS, step);
                    grouped = stream.groupBy(s::apply, Grouped.with(Serdes.String(), Serdes.String())); break; }
                case "group_by_key": grouped = stream.groupByKey(Grouped.with(Serdes.String(), Serdes.String())); break;
                case "count":
                    grouped.count(Materialized.<String, Long, KeyValueStore<org.apache.kafka.common.utils.Bytes, byte[]>>as("counts"))
                        .toStream().to("output", Produced.with(Serdes.String(), Serdes.Long()));
                    counted = true;
                    break;
                default: throw new IllegalArgumentException("operation " + op + " is not in the vocabulary");
            }
        }
        if (!counted) stream.to("output", Produced.with(Serdes.String(), Serdes.String()));

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "conformance");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
        // the driver checkpoints (fsync) after every record: a RAM-backed directory keeps that cheap
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir + "/" + scenario.get("seed").asLong());
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, scenario.get("cache_max_bytes").asText());
        ObjectNode result = json.createObjectNode();
        result.put("seed", scenario.get("seed").asLong());
        try (TopologyTestDriver driver = new TopologyTestDriver(builder.build(), props)) {
            TestInputTopic<String, String> in = driver.createInputTopic("input", new StringSerializer(), new StringSerializer());
            for (JsonNode r : scenario.get("records")) {
                in.pipeInput(r.get(0).isNull() ? null : r.get(0).asText(), r.get(1).isNull() ? null : r.get(1).asText(), r.get(2).asLong());
            }
            ArrayNode output = result.putArray("output");
            if (counted) {
                TestOutputTopic<String, Long> out = driver.createOutputTopic("output", new StringDeserializer(), new LongDeserializer());
                for (TestRecord<String, Long> r : out.readRecordsToList()) {
                    ArrayNode row = output.addArray();
                    row.add(r.key()); if (r.value() == null) row.addNull(); else row.add(r.value()); row.add(r.timestamp());
                }
                ArrayNode store = result.putArray("store");
                KeyValueStore<String, Long> counts = driver.getKeyValueStore("counts");
                try (KeyValueIterator<String, Long> it = counts.all()) {
                    while (it.hasNext()) {
                        KeyValue<String, Long> kv = it.next();
                        store.addArray().add(kv.key).add(kv.value);
                    }
                }
            } else {
                TestOutputTopic<String, String> out = driver.createOutputTopic("output", new StringDeserializer(), new StringDeserializer());
                for (TestRecord<String, String> r : out.readRecordsToList()) {
                    output.addArray().add(r.key()).add(r.value()).add(r.timestamp());
                }
                result.putNull("store");
            }
            result.putNull("error");
        } catch (RuntimeException e) {
            result.put("error", e.toString());
        }
        return result;
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper json = new ObjectMapper();
        JsonNode scenarios = json.readTree(new File(args[0]));
        ArrayNode results = json.createArrayNode();
        for (JsonNode scenario : scenarios) results.add(run(json, scenario, args[2]));
        json.writeValue(new File(args[1]), results);
    }
}
