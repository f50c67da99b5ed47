// Reads change events (one JSON value per line) from standard input and converts each
// with Kafka Connect's JsonConverter (schemas.enable=true), as a sink connector's worker
// does; exits non-zero naming the first line it refuses. Run by test_export_json_converter.py.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.json.JsonConverter;

public class JsonConverterCheck {
    public static void main(String[] args) throws Exception {
        JsonConverter converter = new JsonConverter();
        converter.configure(Map.of("schemas.enable", "true"), false);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        int n = 0;
        while ((line = in.readLine()) != null) {
            n++;
            try {
                SchemaAndValue v = converter.toConnectData("topic", line.getBytes(StandardCharsets.UTF_8));
                if (v.schema() == null || v.value() == null) {
                    throw new IllegalStateException("no schema or value");
                }
            } catch (Exception e) {
                System.err.println("line " + n + ": " + e);
                System.exit(1);
            }
        }
        System.out.println(n);
    }
}
