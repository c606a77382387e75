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
 * tool wrote to stdout and to stderr (each length-prefixed), then whether the call left no thread running (a byte).
 * One request at a time.
 *
 * What a cold JVM does at exit is kept: the first Exit.exit/halt ends the call with its code, and anything the
 * tool writes after it (a catch-all that prints the exit's exception, then exits again) is dropped, as a real
 * exit would never have run it. Each call runs in a thread group of its own: only its threads write to its output,
 * and the reply says whether any of them outlived it (then the caller starts another JVM). The standard streams are replaced once, before any tool class loads, by streams
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

    /**
     * Writes to the current call's buffer when the writer is one of the call's threads (its thread group); a thread
     * an earlier call left behind, or anything after the call's exit, writes to nowhere, as a dead process would.
     */
    static final class Routed extends OutputStream {
        volatile ByteArrayOutputStream target;

        private ByteArrayOutputStream sink() {
            ThreadGroup call = current;
            ByteArrayOutputStream t = target;
            return t != null && call != null && call.parentOf(Thread.currentThread().getThreadGroup()) ? t : null;
        }

        @Override
        public void write(int b) {
            ByteArrayOutputStream t = sink();
            if (t != null) t.write(b);
        }

        @Override
        public void write(byte[] b, int off, int len) {
            ByteArrayOutputStream t = sink();
            if (t != null) t.write(b, off, len);
        }
    }

    static final Routed OUT = new Routed();
    static final Routed ERR = new Routed();
    static volatile Integer exitCode;
    static volatile ThreadGroup current;
    static final long LINGER_MS = 500;  // how long a call's threads may take to end after its main returns
    static int calls;

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
            ThreadGroup group = new ThreadGroup("tool-call-" + (++calls));
            int code = run(main, args, out, err, group);
            replies.writeInt(code);
            writeBytes(replies, out.toByteArray());
            writeBytes(replies, err.toByteArray());
            replies.writeBoolean(settled(group));
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

    /** Runs the tool's main in a thread of the call's group, as a process's main thread, and waits for it. */
    static int run(String main, String[] args, ByteArrayOutputStream out, ByteArrayOutputStream err, ThreadGroup group)
            throws InterruptedException {
        exitCode = null;
        current = group;
        OUT.target = out;
        ERR.target = err;
        int[] code = {0};
        Thread tool = new Thread(group, () -> {
            try {
                // A method handle, not reflection: its frames are hidden in a stack trace the tool prints.
                MethodHandle entry = MethodHandles.publicLookup()
                    .findStatic(Class.forName(main), "main", MethodType.methodType(void.class, String[].class));
                entry.invokeExact(args);
            } catch (ExitCalled e) {
                // the tool exited: exitCode holds the first exit's code
            } catch (Throwable e) {
                e.printStackTrace();  // as an uncaught exception in main: its trace, exit code 1
                code[0] = 1;
            }
        }, "main");
        tool.start();
        tool.join();
        System.out.flush();
        System.err.flush();
        OUT.target = null;
        ERR.target = null;
        Integer exited = exitCode;
        return exited != null ? exited : code[0];
    }

    /**
     * Whether the call left no thread running. One that did (a client a tool did not close on its way out) would
     * have died with a real process: the caller starts another JVM rather than keep it.
     */
    static boolean settled(ThreadGroup group) throws InterruptedException {
        long deadline = System.currentTimeMillis() + LINGER_MS;
        while (group.activeCount() > 0 && System.currentTimeMillis() < deadline) Thread.sleep(10);
        return group.activeCount() == 0;
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
