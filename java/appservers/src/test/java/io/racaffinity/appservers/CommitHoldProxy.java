package io.racaffinity.appservers;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;

/**
 * A TCP proxy in front of one PostgreSQL node (the continuity run puts one in front of each):
 * bytes pass untouched until {@link #holdNextCommitReply()} arms it; then the server's
 * answer to the next {@code COMMIT} (which has run) is held, so the
 * test can kill the node while the transaction is committed and the client does not know it.
 * {@link Hold#release()} then closes that client's connection (what the client of a killed
 * node sees). A copy of java/src/test's CommitReplyProxy that can be armed again and again.
 */
final class CommitHoldProxy implements AutoCloseable {
    private final ServerSocket server;
    private final int targetPort;
    private final List<Socket> sockets = new CopyOnWriteArrayList<>();
    private volatile Hold armed;
    private final List<Hold> holds = new CopyOnWriteArrayList<>();

    /** One held COMMIT reply. */
    static final class Hold {
        /** Counted down once the server answered the held COMMIT. */
        final CountDownLatch withheld = new CountDownLatch(1);
        private final CountDownLatch released = new CountDownLatch(1);

        void release() {
            released.countDown();
        }
    }

    CommitHoldProxy(int targetPort) throws IOException {
        this.targetPort = targetPort;
        this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread t = new Thread(this::accept, "commit-hold-proxy-" + targetPort);
        t.setDaemon(true);
        t.start();
    }

    int port() {
        return server.getLocalPort();
    }

    /** The next COMMIT's answer is held until the returned hold is released. */
    Hold holdNextCommitReply() {
        Hold h = new Hold();
        holds.add(h);
        armed = h;
        return h;
    }

    /** No COMMIT is held from now on (one that is held already stays held until released). */
    void disarm() {
        armed = null;
    }

    private void accept() {
        while (!server.isClosed()) {
            Socket client;
            try {
                client = server.accept();
            } catch (IOException e) {
                return;
            }
            try {
                Socket upstream = new Socket(InetAddress.getLoopbackAddress(), targetPort);
                sockets.add(client);
                sockets.add(upstream);
                Link link = new Link(client, upstream);
                start(link::up, "proxy-up");
                start(link::down, "proxy-down");
            } catch (IOException e) {
                // The node is down: the client sees its connection closed, as a refused one.
                try {
                    client.close();
                } catch (IOException ignored) {
                    // closed
                }
            }
        }
    }

    private static void start(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        t.start();
    }

    private final class Link {
        final Socket client;
        final Socket upstream;
        Link(Socket client, Socket upstream) {
            this.client = client;
            this.upstream = upstream;
        }

        /** Client to server, untouched. */
        void up() {
            byte[] buf = new byte[65536];
            try (InputStream in = client.getInputStream(); OutputStream out = upstream.getOutputStream()) {
                int n;
                while ((n = in.read(buf)) > 0) {
                    out.write(buf, 0, n);
                    out.flush();
                }
            } catch (IOException e) {
                // closed
            } finally {
                closeBoth();
            }
        }

        /**
         * Server to client: the reply that completes a COMMIT (its CommandComplete tag
         * {@code COMMIT}) of an armed proxy is kept back. The reply is spotted rather than
         * the client's COMMIT: pgjdbc sends its COMMIT as a named server-side statement once
         * a connection has used it {@code prepareThreshold} (5) times, without its text.
         */
        void down() {
            byte[] buf = new byte[65536];
            try (InputStream in = upstream.getInputStream(); OutputStream out = client.getOutputStream()) {
                int n;
                while ((n = in.read(buf)) > 0) {
                    Hold h = armed;
                    if (h != null && new String(buf, 0, n, StandardCharsets.ISO_8859_1).contains("COMMIT\0")) {
                        boolean mine;
                        synchronized (CommitHoldProxy.this) {
                            mine = armed == h;
                            if (mine) {
                                armed = null;
                            }
                        }
                        if (mine) {
                            h.withheld.countDown();
                            h.released.await();
                            closeBoth();
                            return;
                        }
                    }
                    out.write(buf, 0, n);
                    out.flush();
                }
            } catch (IOException e) {
                // closed
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                closeBoth();
            }
        }

        void closeBoth() {
            try {
                client.close();
            } catch (IOException e) {
                // closed
            }
            try {
                upstream.close();
            } catch (IOException e) {
                // closed
            }
        }
    }

    @Override
    public void close() throws IOException {
        holds.forEach(Hold::release);
        server.close();
        for (Socket s : sockets) {
            s.close();
        }
    }
}
