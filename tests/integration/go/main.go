// A tenant's application written with franz-go, a Go Kafka client that shares no code with
// librdkafka or the Java client: creates a topic, produces, consumes in a group, lists topics and
// describes the cluster, then prints what it saw as JSON for the test to check.
package main

import (
	"context"
	"encoding/json"
	"fmt"
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
	seeds := kgo.SeedBrokers(strings.Split(bootstrap, ",")...)

	admin, err := kgo.NewClient(seeds, auth, kgo.ClientID(user+"-go"))
	check(err)
	adm := kadm.NewClient(admin)
	created, err := adm.CreateTopics(ctx, 3, 3, nil, topic)
	check(err)
	for _, t := range created {
		if t.Err != nil && !strings.Contains(t.Err.Error(), "TOPIC_ALREADY_EXISTS") {
			check(t.Err)
		}
	}

	producer, err := kgo.NewClient(seeds, auth, kgo.ClientID(user+"-go"), kgo.DefaultProduceTopic(topic))
	check(err)
	for i := 0; i < count; i++ {
		check(producer.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("%s-%d", user, i))}).FirstErr())
	}
	producer.Close()

	consumer, err := kgo.NewClient(seeds, auth, kgo.ClientID(user+"-go"), kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
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

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
