import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.nio.charset.StandardCharsets;

import org.apache.kafka.common.utils.Exit;

/**
 * Runs Kafka's command-line tools one after another in one warm JVM, for a test suite that calls them hundreds
 * of times: each call is the tool's own main class with its own arguments, as `bin/kafka-*.sh` runs it, but
 * without a JVM start, class loading and JIT warm-up per call.
 *
 * Protocol on the process's own stdin/stdout (binary, big-endian): a request is the argument count, the main
 * class and the arguments (each a length-prefixed UTF-8 string); the reply is the exit code, then the bytes the
 * tool wrote to stdout and to stderr (each length-prefixed). One request at a time.
 *
 * What a cold JVM does at exit is kept: the first Exit.exit/halt ends the call with its code, and anything the
 * tool writes after it (a catch-all that prints the exit's exception, then exits again) is dropped, as a real
 * exit would never have run it. The standard streams are replaced once, before any tool class loads, by streams
 * that write to the current call's buffers: Scala's Console and log4j's console appender keep the stream they
 * first see.
 */
public final class ToolServer {
    /** Thrown in place of an exit; an Error, so that tools' catch (Exception) blocks let it through. */
    static final class ExitCalled extends Error {
        final int code;

        ExitCalled(int code) {
            super("exit " + code, null, false, false);
            this.code = code;
        }
    }

    /** Writes to the current call's buffer; after the call has exited, to nowhere. */
    static final class Routed extends OutputStream {
        volatile ByteArrayOutputStream target;

        @Override
        public void write(int b) {
            ByteArrayOutputStream t = target;
            if (t != null) t.write(b);
        }

        @Override
        public void write(byte[] b, int off, int len) {
            ByteArrayOutputStream t = target;
            if (t != null) t.write(b, off, len);
        }
    }

    static final Routed OUT = new Routed();
    static final Routed ERR = new Routed();
    static volatile Integer exitCode;

    public static void main(String[] ignored) throws Exception {
        DataInputStream requests = new DataInputStream(new BufferedInputStream(new FileInputStream(FileDescriptor.in)));
        DataOutputStream replies = new DataOutputStream(new BufferedOutputStream(new FileOutputStream(FileDescriptor.out)));
        System.setOut(new PrintStream(OUT, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(ERR, true, StandardCharsets.UTF_8));
        System.setIn(InputStream.nullInputStream());  // as run_tool's stdin, /dev/null
        Exit.setExitProcedure((code, message) -> exit(code));
        Exit.setHaltProcedure((code, message) -> exit(code));
        while (true) {
            int count;
            try {
                count = requests.readInt();
            } catch (EOFException end) {
                return;
            }
            String main = readString(requests);
            String[] args = new String[count];
            for (int i = 0; i < count; i++) args[i] = readString(requests);
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            int code = run(main, args, out, err);
            replies.writeInt(code);
            writeBytes(replies, out.toByteArray());
            writeBytes(replies, err.toByteArray());
            replies.flush();
        }
    }

    static void exit(int code) {
        if (exitCode == null) {
            exitCode = code;
            System.out.flush();
            System.err.flush();
            OUT.target = null;
            ERR.target = null;
        }
        throw new ExitCalled(code);
    }

    static int run(String main, String[] args, ByteArrayOutputStream out, ByteArrayOutputStream err) {
        exitCode = null;
        OUT.target = out;
        ERR.target = err;
        int code = 0;
        try {
            // A method handle, not reflection: its frames are hidden in a stack trace the tool prints, which then
            // reads as a cold JVM's but for ToolServer's own two frames at the bottom.
            MethodHandle entry = MethodHandles.publicLookup()
                .findStatic(Class.forName(main), "main", MethodType.methodType(void.class, String[].class));
            entry.invokeExact(args);
        } catch (ExitCalled e) {
            // the tool exited: exitCode holds the first exit's code
        } catch (Throwable e) {
            e.printStackTrace();  // as an uncaught exception in main: its trace, exit code 1
            code = 1;
        }
        System.out.flush();
        System.err.flush();
        OUT.target = null;
        ERR.target = null;
        Integer exited = exitCode;
        return exited != null ? exited : code;
    }

    static String readString(DataInputStream in) throws java.io.IOException {
        byte[] bytes = new byte[in.readInt()];
        in.readFully(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    static void writeBytes(DataOutputStream out, byte[] bytes) throws java.io.IOException {
        out.writeInt(bytes.length);
        out.write(bytes);
    }
}
