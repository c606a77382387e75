import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.CallbackHandler;
import javax.security.auth.callback.NameCallback;
import javax.security.auth.login.AppConfigurationEntry;
import javax.security.sasl.SaslServer;
import org.apache.kafka.common.security.oauthbearer.internals.OAuthBearerClientInitialResponse;
import org.apache.kafka.common.security.oauthbearer.internals.OAuthBearerSaslServer;
import org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredJws;
import org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler;
import org.apache.kafka.common.security.plain.PlainAuthenticateCallback;
import org.apache.kafka.common.security.plain.internals.PlainSaslServer;
import org.apache.kafka.common.security.scram.ScramCredential;
import org.apache.kafka.common.security.scram.ScramCredentialCallback;
import org.apache.kafka.common.security.scram.internals.ScramFormatter;
import org.apache.kafka.common.security.scram.internals.ScramMechanism;
import org.apache.kafka.common.security.scram.internals.ScramMessages;
import org.apache.kafka.common.security.scram.internals.ScramSaslServer;
import org.apache.kafka.common.security.token.delegation.internals.DelegationTokenCredentialCallback;

/**
 * Whose login a first SASL message is, by Kafka's own server classes (the differential test of
 * tests/integration/test_sasl_differential.py). Reads lines "MECHANISM HEX" on stdin and answers each with
 * "OK HEX" (the authorization id the broker's SaslServer ends with, UTF-8) or "ERR message".
 *
 * Every credential check is made to pass, so that only the parsing decides: PLAIN takes any password,
 * SCRAM has a credential for any name (and the exchange is completed with a proof for it), a SCRAM
 * delegation token belongs to TOKEN_OWNER, and OAUTHBEARER uses Kafka's unsecured-token validator with
 * its defaults (principal claim "sub"), as the test cluster's brokers do.
 */
public final class SaslParse {
    static final String PASSWORD = "pw";
    static final String TOKEN_OWNER = "<the delegation token's owner>";

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.trim().split(" ", -1);
            String answer;
            try {
                byte[] message = HexFormat.of().parseHex(parts.length > 1 ? parts[1] : "");
                String name = read(parts[0], message);
                answer = "OK " + HexFormat.of().formatHex(name.getBytes(StandardCharsets.UTF_8));
            } catch (Throwable e) {
                answer = "ERR " + String.valueOf(e).replaceAll("[\\r\\n]+", " ");
            }
            System.out.println(answer);
            System.out.flush();
        }
    }

    static String read(String mechanism, byte[] message) throws Exception {
        switch (mechanism) {
            case "PLAIN":
                return plain(message);
            case "SCRAM-SHA-256":
            case "SCRAM-SHA-512":
                return scram(ScramMechanism.forMechanismName(mechanism), message);
            case "OAUTHBEARER":
                return oauth(message);
            default:
                throw new IllegalArgumentException("unknown mechanism " + mechanism);
        }
    }

    static String plain(byte[] message) throws Exception {
        CallbackHandler anyPassword = callbacks -> {
            for (Callback c : callbacks)
                if (c instanceof PlainAuthenticateCallback)
                    ((PlainAuthenticateCallback) c).authenticated(true);
        };
        SaslServer server = new PlainSaslServer(anyPassword);
        server.evaluateResponse(message);
        return completed(server);
    }

    static String scram(ScramMechanism mechanism, byte[] message) throws Exception {
        ScramFormatter formatter = new ScramFormatter(mechanism);
        int iterations = mechanism.minIterations();
        ScramCredential credential = formatter.generateCredential(PASSWORD, iterations);
        CallbackHandler anyName = callbacks -> {
            for (Callback c : callbacks) {
                if (c instanceof DelegationTokenCredentialCallback)
                    ((DelegationTokenCredentialCallback) c).tokenOwner(TOKEN_OWNER);
                if (c instanceof ScramCredentialCallback)
                    ((ScramCredentialCallback) c).scramCredential(credential);
            }
        };
        SaslServer server = new ScramSaslServer(mechanism, Map.of(), anyName);
        ScramMessages.ServerFirstMessage serverFirst = new ScramMessages.ServerFirstMessage(server.evaluateResponse(message));
        ScramMessages.ClientFirstMessage clientFirst = new ScramMessages.ClientFirstMessage(message);
        ScramMessages.ClientFinalMessage clientFinal = new ScramMessages.ClientFinalMessage(
                clientFirst.gs2Header().getBytes(StandardCharsets.UTF_8), serverFirst.nonce());
        byte[] salted = formatter.saltedPassword(PASSWORD, credential.salt(), iterations);
        clientFinal.proof(formatter.clientProof(salted, clientFirst, serverFirst, clientFinal));
        server.evaluateResponse(clientFinal.toBytes());
        return completed(server);
    }

    static String oauth(byte[] message) throws Exception {
        OAuthBearerUnsecuredValidatorCallbackHandler validator = new OAuthBearerUnsecuredValidatorCallbackHandler();
        AppConfigurationEntry entry = new AppConfigurationEntry(
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
                AppConfigurationEntry.LoginModuleControlFlag.REQUIRED,
                Map.of());
        validator.configure(Map.of(), "OAUTHBEARER", List.of(entry));
        SaslServer server = new OAuthBearerSaslServer(validator);
        byte[] challenge = server.evaluateResponse(message);
        if (challenge != null && challenge.length > 0) {
            // The validator refused the token: say why, from the token class the validator uses.
            String token = new OAuthBearerClientInitialResponse(message).tokenValue();
            String why = new String(challenge, StandardCharsets.UTF_8);
            try {
                new OAuthBearerUnsecuredJws(token, "sub", "scope");
            } catch (Throwable e) {
                why = why + " " + e;
            }
            throw new IllegalStateException("token refused: " + why);
        }
        return completed(server);
    }

    static String completed(SaslServer server) {
        if (!server.isComplete())
            throw new IllegalStateException("the exchange did not complete");
        return server.getAuthorizationID();
    }
}
