// A broker-side KIP-714 telemetry exporter for tests: with it installed (metric.reporters), Kafka
// offers GetTelemetrySubscriptions/PushTelemetry; every push is logged with the client instance id
// the broker knows, so a test can compare it with the id the proxy put into its spans.

import java.util.List;
import java.util.Map;

import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;

public class TelemetrySink implements MetricsReporter, ClientTelemetryExporterProvider {
    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return (ClientTelemetryContext context, ClientTelemetryPayload payload) ->
            System.out.println("vcproxy-telemetry-sink push from " + payload.clientInstanceId());
    }

    @Override public void init(List<KafkaMetric> metrics) { }
    @Override public void metricChange(KafkaMetric metric) { }
    @Override public void metricRemoval(KafkaMetric metric) { }
    @Override public void close() { }
    @Override public void configure(Map<String, ?> configs) { }
}
