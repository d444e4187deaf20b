package io.racaffinity.test;

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
 * A TCP proxy in front of one PostgreSQL node that, once armed, lets the next {@code COMMIT} a
 * client sends reach the server and withholds the server's answer: the transaction commits, the
 * client never learns it (the reply lost). The client's socket is then closed, at once or when
 * {@link #release()} is called (so a test can kill the node in between).
 */
public final class CommitReplyProxy implements AutoCloseable {
    private final ServerSocket server;
    private final int targetPort;
    private final List<Socket> sockets = new CopyOnWriteArrayList<>();
    private volatile boolean armed;
    private volatile boolean holdUntilRelease;
    private volatile boolean swallow;
    /** Counted down once the server answered a withheld COMMIT. */
    public final CountDownLatch replyWithheld = new CountDownLatch(1);
    private final CountDownLatch released = new CountDownLatch(1);

    public CommitReplyProxy(int targetPort) throws IOException {
        this.targetPort = targetPort;
        this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread t = new Thread(this::accept, "commit-reply-proxy");
        t.setDaemon(true);
        t.start();
    }

    /** @return the JDBC URL through this proxy */
    public String url() {
        return "jdbc:postgresql://127.0.0.1:" + server.getLocalPort() + "/postgres";
    }

    /**
     * The next COMMIT's answer is lost.
     *
     * @param holdUntilRelease keep the client waiting until {@link #release()} (else its socket closes at once)
     */
    public void loseNextCommitReply(boolean holdUntilRelease) {
        this.holdUntilRelease = holdUntilRelease;
        this.armed = true;
    }

    /**
     * The next COMMIT never reaches the server, and the client's socket closes while the server's
     * stays open: a blackhole, the transaction still in progress behind it.
     */
    public void swallowNextCommit() {
        this.swallow = true;
    }

    /** Closes the client of a withheld reply. */
    public void release() {
        released.countDown();
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
                start(() -> link.up(), "proxy-up");
                start(() -> link.down(), "proxy-down");
            } catch (IOException e) {
                // the node is down: the client sees its connection closed
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
        volatile boolean commitSent;

        Link(Socket client, Socket upstream) {
            this.client = client;
            this.upstream = upstream;
        }

        /** Client to server: spots the COMMIT of an armed proxy. */
        void up() {
            byte[] buf = new byte[65536];
            try {
                // Not closed by a try-with-resources: closing a socket's stream closes the socket.
                InputStream in = client.getInputStream();
                OutputStream out = upstream.getOutputStream();
                int n;
                while ((n = in.read(buf)) > 0) {
                    String text = new String(buf, 0, n, StandardCharsets.ISO_8859_1);
                    if (swallow && text.contains("COMMIT")) {
                        swallow = false;
                        replyWithheld.countDown();
                        client.close(); // the server's socket stays open: its backend waits in the transaction
                        return;
                    }
                    if (armed && text.contains("COMMIT")) {
                        armed = false;
                        commitSent = true;
                    }
                    out.write(buf, 0, n);
                    out.flush();
                }
                closeBoth();
            } catch (IOException e) {
                closeBoth();
            }
        }

        /** Server to client: after a spotted COMMIT, the answer is read and dropped. */
        void down() {
            byte[] buf = new byte[65536];
            try (InputStream in = upstream.getInputStream(); OutputStream out = client.getOutputStream()) {
                int n;
                while ((n = in.read(buf)) > 0) {
                    if (commitSent) {
                        replyWithheld.countDown();
                        if (holdUntilRelease) {
                            released.await();
                        }
                        closeBoth();
                        return;
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
        released.countDown();
        server.close();
        for (Socket s : sockets) {
            s.close();
        }
    }
}
