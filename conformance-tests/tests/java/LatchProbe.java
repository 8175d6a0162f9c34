// A Curator LeaderLatch driven over stdin and stdout, for the election
// interoperability test (conformance-tests/tests/zk_election.rs):
//
//   java LatchProbe CONNECT_STRING LATCH_PATH ID
//
// joins the latch at LATCH_PATH (below the connect string's chroot) as
// participant ID and prints one line per event: "started", "leader" when
// it becomes leader, "not-leader" when it stops, and for each "ask" line
// on stdin "leader-id <getLeader().getId()>" then "has-leadership
// <true|false>". "close" closes the latch ("closed"); end of input or
// SIGTERM closes the latch and the client and exits.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class LatchProbe {
    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: LatchProbe CONNECT_STRING LATCH_PATH ID");
            System.exit(2);
        }
        // No ensemble tracker: it would rewrite the connect string from the
        // servers' config and drop its chroot.
        CuratorFramework client = CuratorFrameworkFactory.builder()
            .connectString(args[0])
            .sessionTimeoutMs(10_000)
            .connectionTimeoutMs(10_000)
            .retryPolicy(new ExponentialBackoffRetry(100, 10))
            .ensembleTracker(false)
            .build();
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            System.err.println("no connection to " + args[0]);
            System.exit(1);
        }
        LeaderLatch latch = new LeaderLatch(client, args[1], args[2]);
        latch.addListener(new LeaderLatchListener() {
            @Override
            public void isLeader() {
                say("leader");
            }

            @Override
            public void notLeader() {
                say("not-leader");
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> close(latch, client)));
        latch.start();
        say("started");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            try {
                switch (line.trim()) {
                    case "ask":
                        say("leader-id " + latch.getLeader().getId());
                        say("has-leadership " + latch.hasLeadership());
                        break;
                    case "close":
                        latch.close();
                        say("closed");
                        break;
                    default:
                        say("unknown " + line);
                }
            } catch (Exception e) {
                say("error " + e);
            }
        }
        System.exit(0);
    }

    private static void close(LeaderLatch latch, CuratorFramework client) {
        try {
            if (latch.getState() == LeaderLatch.State.STARTED) {
                latch.close();
            }
        } catch (Exception e) {
            System.err.println("closing the latch: " + e);
        }
        client.close();
    }
}
