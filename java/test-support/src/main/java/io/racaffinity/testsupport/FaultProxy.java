package io.racaffinity.testsupport;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;

/**
 * A TCP proxy in front of one PostgreSQL node, for the faults the node harness cannot give: a
 * COMMIT whose reply is lost or held (the transaction committed, the client does not know it), a
 * node that stops answering while its sockets stay open, connections reset, connections refused.
 * The Java counterpart of python/tests/faultproxy.py; the Java tests (ReplayTest, ReplayMatrixTest)
 * and the Tomcat continuity run share it.
 *
 * <p>A COMMIT is spotted in the server's reply (the {@code CommandComplete} tag {@code COMMIT}),
 * not in the client's message: pgjdbc sends a COMMIT it has run {@code prepareThreshold} (5)
 * times on a connection as a named server-side statement, without its text. So when a COMMIT
 * fault acts, the server has run the COMMIT. {@link #swallowNextCommit()} alone reads the client's
 * text (the COMMIT must not reach the server): use it on a connection's first COMMITs.
 */
public final class FaultProxy implements AutoCloseable {
    /** What an armed COMMIT fault does with the reply. */
    private enum Kind { LOSE, LOSE_THEN_REFUSE, HOLD, BLACKHOLE }

    /** One COMMIT fault: the test waits on {@link #withheld}; a held reply waits for {@link #release()}. */
    public static final class Hold {
        /** Counted down once the fault acted: the server answered the COMMIT (or the COMMIT was swallowed). */
        public final CountDownLatch withheld = new CountDownLatch(1);
        private final CountDownLatch released = new CountDownLatch(1);
        private final Kind kind;

        private Hold(Kind kind) {
            this.kind = kind;
        }

        /** Whether the fault acted. */
        public boolean acted() {
            return withheld.getCount() == 0;
        }

        /** Closes the client of a held reply ({@link #holdNextCommitReply()}). */
        public void release() {
            released.countDown();
        }
    }

    private final int targetPort;
    private final ServerSocket server;
    private final Object lock = new Object();
    private final Set<Link> links = ConcurrentHashMap.newKeySet();
    private final List<Hold> holds = new CopyOnWriteArrayList<>();
    private volatile boolean refusing;
    private volatile boolean blackhole;
    private volatile boolean closed;
    private volatile Hold armed;
    private volatile Hold swallow;

    /** Listens on a free loopback port, forwarding to {@code targetPort} on the loopback address. */
    public FaultProxy(int targetPort) throws IOException {
        this.targetPort = targetPort;
        this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        start(this::accept, "fault-proxy-" + targetPort);
    }

    /** @return the port clients connect to */
    public int port() {
        return server.getLocalPort();
    }

    /** @return the JDBC URL of database {@code postgres} through this proxy */
    public String url() {
        return "jdbc:postgresql://127.0.0.1:" + port() + "/postgres";
    }

    // ---- faults -------------------------------------------------------------------------------

    /** Every connection, open or new, stops moving bytes; none is closed (a call hangs until its own timeout). */
    public void blackhole() {
        blackhole = true;
    }

    /** Resets every open connection (the client sees a reset, the server its client gone); new ones are accepted. */
    public void reset() {
        for (Link l : links) {
            l.reset();
        }
    }

    /**
     * Closes every connection and refuses new ones (a node gone): each is reset as soon as it is
     * accepted. The listener keeps its port: closed, it would be back in the kernel's ephemeral
     * range, where an outgoing connection can take it and {@link #heal()} could not listen there
     * again (seen: {@code BindException} once in a few dozen refusals).
     */
    public void refuse() {
        refusing = true;
        for (Link l : links) {
            l.close();
        }
    }

    /** The next COMMIT runs; its reply is dropped and the client's connection reset at once. */
    public Hold loseNextCommitReply() {
        return arm(Kind.LOSE);
    }

    /** The next COMMIT runs; its reply is dropped and the proxy {@link #refuse() refuses} from then on. */
    public Hold loseNextCommitReplyThenRefuse() {
        return arm(Kind.LOSE_THEN_REFUSE);
    }

    /**
     * The next COMMIT runs; its reply is held until {@link Hold#release()}, then the client's
     * connection closes (so a test can kill the node in between).
     */
    public Hold holdNextCommitReply() {
        return arm(Kind.HOLD);
    }

    /** The next COMMIT runs; its reply is held and the proxy is a {@link #blackhole()} from then on. */
    public Hold blackholeAfterNextCommit() {
        return arm(Kind.BLACKHOLE);
    }

    /**
     * The next client message with the text {@code COMMIT} never reaches the server, and the
     * client's socket closes while the server's stays open: the transaction stays in progress
     * behind it.
     */
    public Hold swallowNextCommit() {
        Hold h = new Hold(Kind.LOSE);
        holds.add(h);
        swallow = h;
        return h;
    }

    /** No COMMIT fault from now on (a reply held already stays held until released). */
    public void disarm() {
        armed = null;
        swallow = null;
    }

    /**
     * Ends every fault: connections are accepted again, and the connections a blackhole held are
     * dropped (as after a partition that outlasted TCP: bytes sent into the hole never arrive late).
     */
    public void heal() {
        disarm();
        boolean wasHole = blackhole;
        synchronized (lock) {
            blackhole = false;
            lock.notifyAll();
        }
        if (wasHole) {
            for (Link l : links) {
                l.reset();
            }
        }
        refusing = false;
    }

    private Hold arm(Kind kind) {
        Hold h = new Hold(kind);
        holds.add(h);
        armed = h;
        return h;
    }

    /** Takes the armed fault for one connection (only one acts on it). */
    private boolean claim(Hold h) {
        synchronized (lock) {
            if (armed != h) {
                return false;
            }
            armed = null;
            return true;
        }
    }

    // ---- plumbing -----------------------------------------------------------------------------

    private void accept() {
        while (!server.isClosed()) {
            Socket client;
            try {
                client = server.accept();
            } catch (IOException e) {
                return;
            }
            if (refusing) {
                reset(client);
                continue;
            }
            Socket upstream = new Socket();
            try {
                upstream.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), targetPort), 5000);
            } catch (IOException e) {
                // The node is down: the client sees its connection closed, as a refused one.
                quietly(client);
                quietly(upstream);
                continue;
            }
            Link link = new Link(client, upstream);
            links.add(link);
            start(link::up, "fault-proxy-up");
            start(link::down, "fault-proxy-down");
        }
    }

    private static void start(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        t.start();
    }

    /** Closes with a reset (SO_LINGER 0), as a lost or refused connection looks to the client. */
    private static void reset(Socket s) {
        try {
            s.setSoLinger(true, 0);
        } catch (IOException e) {
            // closed already
        }
        quietly(s);
    }

    private static void quietly(Socket s) {
        try {
            s.close();
        } catch (IOException e) {
            // closed
        }
    }

    /** Waits while a blackhole is on; true when it was on (the link is dropped then: healed or closed). */
    private boolean hole() throws InterruptedException {
        if (!blackhole) {
            return false;
        }
        synchronized (lock) {
            while (blackhole && !closed) {
                lock.wait();
            }
        }
        return true;
    }

    private static boolean contains(byte[] buf, int n, String text) {
        return new String(buf, 0, n, StandardCharsets.ISO_8859_1).contains(text);
    }

    private final class Link {
        final Socket client;
        final Socket upstream;

        Link(Socket client, Socket upstream) {
            this.client = client;
            this.upstream = upstream;
        }

        /** Client to server: a swallowed COMMIT stops here. */
        void up() {
            byte[] buf = new byte[65536];
            try {
                // Not closed by a try-with-resources: closing a socket's stream closes the socket,
                // and a swallowed COMMIT leaves the server's open.
                InputStream in = client.getInputStream();
                OutputStream out = upstream.getOutputStream();
                int n;
                while ((n = in.read(buf)) > 0) {
                    if (hole()) {
                        reset();
                        return;
                    }
                    Hold s = swallow;
                    if (s != null && contains(buf, n, "COMMIT")) {
                        synchronized (lock) {
                            if (swallow != s) {
                                s = null;
                            } else {
                                swallow = null;
                            }
                        }
                        if (s != null) {
                            s.withheld.countDown();
                            quietly(client); // the server's socket stays open: its backend waits in the transaction
                            return;
                        }
                    }
                    out.write(buf, 0, n);
                    out.flush();
                }
                close();
            } catch (IOException e) {
                close();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                close();
            }
        }

        /** Server to client: an armed fault acts on the reply that completes a COMMIT. */
        void down() {
            byte[] buf = new byte[65536];
            try {
                InputStream in = upstream.getInputStream();
                OutputStream out = client.getOutputStream();
                int n;
                while ((n = in.read(buf)) > 0) {
                    if (hole()) {
                        reset();
                        return;
                    }
                    Hold h = armed;
                    if (h != null && contains(buf, n, "COMMIT\0") && claim(h)) {
                        switch (h.kind) {
                            case LOSE -> {
                                h.withheld.countDown();
                                reset();
                                return;
                            }
                            case LOSE_THEN_REFUSE -> {
                                // Counted before refuse() ends the sessions: the client sees its connection
                                // go from then on and may give up, and its test read acted(), before this
                                // thread runs again.
                                h.withheld.countDown();
                                refuse();
                                reset();
                                return;
                            }
                            case HOLD -> {
                                h.withheld.countDown();
                                h.released.await();
                                close();
                                return;
                            }
                            case BLACKHOLE -> {
                                // Counted before the hole opens, as LOSE_THEN_REFUSE counts before refuse():
                                // whoever sees the hole (a stalled link, a timeout) then sees acted().
                                h.withheld.countDown();
                                blackhole = true;
                                continue; // the reply is in the hole
                            }
                        }
                    }
                    out.write(buf, 0, n);
                    out.flush();
                }
                close();
            } catch (IOException e) {
                close();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                close();
            }
        }

        /** The client gets a reset, as a lost connection looks to it. */
        void reset() {
            FaultProxy.reset(client);
            close();
        }

        void close() {
            links.remove(this);
            quietly(client);
            quietly(upstream);
        }
    }

    @Override
    public void close() {
        closed = true;
        holds.forEach(Hold::release);
        synchronized (lock) {
            blackhole = false;
            lock.notifyAll();
        }
        try {
            server.close();
        } catch (IOException e) {
            // closed
        }
        refuse();
    }
}
