// A tenant's application written with franz-go, a Go Kafka client that shares no code with
// librdkafka or the Java client: creates a topic, produces, consumes in a group, lists topics and
// describes the cluster, then prints what it saw as JSON for the test to check.
//
// With TLS_CA_FILE set it speaks TLS (SASL_SSL), and with DIAL_ADDRESS set too it connects every
// broker name to that address while the TLS server name (SNI) stays the broker's name: the test's
// own name resolution for the proxy's SNI mode.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

type result struct {
	Topics    []string `json:"topics"`
	Consumed  []string `json:"consumed"`
	ClusterID string   `json:"cluster_id"`
	Groups    []string `json:"groups"`
}

func main() {
	if len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: tenantclient BOOTSTRAP USER PASSWORD TOPIC GROUP COUNT")
		os.Exit(2)
	}
	bootstrap, user, password, topic, group := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	count, err := strconv.Atoi(os.Args[6])
	check(err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	auth := kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism())
	base := []kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...), auth, kgo.ClientID(user + "-go")}
	if dial := dialer(); dial != nil {
		base = append(base, dial)
	}
	opts := func(more ...kgo.Opt) []kgo.Opt { return append(append([]kgo.Opt{}, base...), more...) }

	admin, err := kgo.NewClient(opts()...)
	check(err)
	adm := kadm.NewClient(admin)
	created, err := adm.CreateTopics(ctx, 3, 3, nil, topic)
	check(err)
	for _, t := range created {
		if t.Err != nil && !strings.Contains(t.Err.Error(), "TOPIC_ALREADY_EXISTS") {
			check(t.Err)
		}
	}

	producer, err := kgo.NewClient(opts(kgo.DefaultProduceTopic(topic))...)
	check(err)
	for i := 0; i < count; i++ {
		check(producer.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("%s-%d", user, i))}).FirstErr())
	}
	producer.Close()

	consumer, err := kgo.NewClient(opts(kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	check(err)
	var out result
	for len(out.Consumed) < count {
		fetches := consumer.PollFetches(ctx)
		if errs := fetches.Errors(); len(errs) > 0 {
			check(errs[0].Err)
		}
		fetches.EachRecord(func(r *kgo.Record) { out.Consumed = append(out.Consumed, string(r.Value)) })
	}
	check(consumer.CommitUncommittedOffsets(ctx))
	consumer.Close()

	topics, err := adm.ListTopics(ctx)
	check(err)
	out.Topics = topics.Names()
	meta, err := adm.Metadata(ctx)
	check(err)
	out.ClusterID = meta.Cluster
	groups, err := adm.ListGroups(ctx)
	check(err)
	out.Groups = groups.Groups()
	admin.Close()
	check(json.NewEncoder(os.Stdout).Encode(out))
}

// dialer is nil for plaintext; else TLS with the CA in TLS_CA_FILE, to DIAL_ADDRESS if set.
func dialer() kgo.Opt {
	caFile := os.Getenv("TLS_CA_FILE")
	if caFile == "" {
		return nil
	}
	pem, err := os.ReadFile(caFile)
	check(err)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		check(fmt.Errorf("no certificate in %s", caFile))
	}
	address := os.Getenv("DIAL_ADDRESS")
	return kgo.Dialer(func(ctx context.Context, network, hostPort string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(hostPort)
		if err != nil {
			return nil, err
		}
		target := hostPort
		if address != "" {
			target = net.JoinHostPort(address, port)
		}
		raw, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, target)
		if err != nil {
			return nil, err
		}
		conn := tls.Client(raw, &tls.Config{ServerName: host, RootCAs: roots, MinVersion: tls.VersionTLS12})
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	})
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
