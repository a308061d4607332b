// franz-go (Go module proxy): the standard scenarios (convention: compat/kit.py).
//
//	franz-go-compat BOOTSTRAP SCENARIO PREFIX
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const wait = 30 * time.Second

var (
	bootstrap string
	prefix    string
)

type notApplicable struct{ why string }

func (n notApplicable) Error() string { return n.why }

func fail(format string, args ...any) error { return fmt.Errorf(format, args...) }

// rec is one record as sent or read.
type rec struct {
	Partition int32
	Key       string
	Value     string
	Headers   string
}

func records(n int, partitions int32) []rec {
	out := make([]rec, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, rec{int32(i) % partitions, fmt.Sprintf("k%d", i),
			strings.Repeat(fmt.Sprintf("value-%d-", i), 8), fmt.Sprintf("seq=%d,src=compat", i)})
	}
	return out
}

func toKgo(topic string, r rec) *kgo.Record {
	kr := &kgo.Record{Topic: topic, Partition: r.Partition, Key: []byte(r.Key), Value: []byte(r.Value)}
	for _, h := range strings.Split(r.Headers, ",") {
		kv := strings.SplitN(h, "=", 2)
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: kv[0], Value: []byte(kv[1])})
	}
	return kr
}

func fromKgo(kr *kgo.Record) rec {
	var hs []string
	for _, h := range kr.Headers {
		hs = append(hs, h.Key+"="+string(h.Value))
	}
	return rec{kr.Partition, string(kr.Key), string(kr.Value), strings.Join(hs, ",")}
}

func ctxWait() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), wait)
}

func client(opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{kgo.SeedBrokers(bootstrap), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequestTimeoutOverhead(10 * time.Second)}
	return kgo.NewClient(append(base, opts...)...)
}

func createTopic(topic string, partitions int32, configs map[string]*string) error {
	cl, err := client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := ctxWait()
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, partitions, 1, configs, topic)
	if err != nil {
		return err
	}
	return resp.Error()
}

func produce(topic string, recs []rec, opts ...kgo.Opt) error {
	cl, err := client(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := ctxWait()
	defer cancel()
	batch := make([]*kgo.Record, 0, len(recs))
	for _, r := range recs {
		batch = append(batch, toKgo(topic, r))
	}
	return cl.ProduceSync(ctx, batch...).FirstErr()
}

func readAssigned(topic string, partitions int32, count int, opts ...kgo.Opt) ([]rec, error) {
	offsets := map[int32]kgo.Offset{}
	for p := int32(0); p < partitions; p++ {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	cl, err := client(append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchMaxWait(500*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var got []rec
	deadline := time.Now().Add(wait)
	for len(got) < count && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				return got, fmt.Errorf("fetch %s[%d]: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		fs.EachRecord(func(kr *kgo.Record) { got = append(got, fromKgo(kr)) })
	}
	return got, nil
}

func checkRecords(sent, got []rec) error {
	by := func(l []rec) map[int32][]rec {
		m := map[int32][]rec{}
		for _, r := range l {
			m[r.Partition] = append(m[r.Partition], r)
		}
		return m
	}
	want, have := by(sent), by(got)
	for p := range want {
		if len(want[p]) != len(have[p]) {
			return fail("partition %d: sent %d records, read %d", p, len(want[p]), len(have[p]))
		}
		for i := range want[p] {
			if want[p][i] != have[p][i] {
				return fail("partition %d record %d: sent %+v, read %+v", p, i, want[p][i], have[p][i])
			}
		}
	}
	for p := range have {
		if _, ok := want[p]; !ok {
			return fail("partition %d: read %d records nobody sent there", p, len(have[p]))
		}
	}
	return nil
}

func waitUntil(cond func() bool, what string) error {
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			return fail("timed out after %s waiting for %s", wait, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

var codecs = map[string]kgo.CompressionCodec{
	"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
	"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
}

func produceConsume(codec string) error {
	topic := prefix + "-t"
	if err := createTopic(topic, 3, nil); err != nil {
		return err
	}
	recs := records(300, 3)
	if err := produce(topic, recs, kgo.ProducerBatchCompression(codecs[codec]), kgo.DisableIdempotentWrite(),
		kgo.RequiredAcks(kgo.LeaderAck())); err != nil {
		return err
	}
	got, err := readAssigned(topic, 3, len(recs))
	if err != nil {
		return err
	}
	return checkRecords(recs, got)
}

func idempotent() error {
	topic := prefix + "-t"
	if err := createTopic(topic, 2, nil); err != nil {
		return err
	}
	recs := records(2000, 2)
	if err := produce(topic, recs, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchMaxBytes(4096)); err != nil {
		return err
	}
	got, err := readAssigned(topic, 2, len(recs))
	if err != nil {
		return err
	}
	return checkRecords(recs, got)
}

// member is one group consumer polling in its own goroutine.
type member struct {
	cl       *kgo.Client
	mu       sync.Mutex
	assigned map[int32]bool
	err      error
	done     chan struct{}
}

func newMember(topic, group string, seen *sync.Map) (*member, error) {
	m := &member{assigned: map[int32]bool{}, done: make(chan struct{})}
	cl, err := client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(10*time.Second),
		kgo.HeartbeatInterval(500*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.AutoCommitInterval(100*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			m.mu.Lock()
			for _, p := range a[topic] {
				m.assigned[p] = true
			}
			m.mu.Unlock()
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, c *kgo.Client, r map[string][]int32) {
			c.CommitMarkedOffsets(ctx)
			m.mu.Lock()
			for _, p := range r[topic] {
				delete(m.assigned, p)
			}
			m.mu.Unlock()
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, r map[string][]int32) {
			m.mu.Lock()
			for _, p := range r[topic] {
				delete(m.assigned, p)
			}
			m.mu.Unlock()
		}))
	if err != nil {
		return nil, err
	}
	m.cl = cl
	go func() {
		defer close(m.done)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			for _, fe := range fs.Errors() {
				m.mu.Lock()
				m.err = fmt.Errorf("fetch %s[%d]: %w", fe.Topic, fe.Partition, fe.Err)
				m.mu.Unlock()
			}
			fs.EachRecord(func(kr *kgo.Record) { seen.Store(fmt.Sprintf("%d/%s", kr.Partition, kr.Key), true) })
		}
	}()
	return m, nil
}

func (m *member) partitions() map[int32]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int32]bool{}
	for p := range m.assigned {
		out[p] = true
	}
	return out
}

func (m *member) close() {
	ctx, cancel := ctxWait()
	defer cancel()
	m.cl.CommitUncommittedOffsets(ctx)
	m.cl.Close() // leaves the group
	<-m.done
}

func group() error {
	topic, gid := prefix+"-t", prefix+"-g"
	if err := createTopic(topic, 4, nil); err != nil {
		return err
	}
	recs := records(400, 4)
	if err := produce(topic, recs); err != nil {
		return err
	}
	var seen sync.Map
	count := func() int {
		n := 0
		seen.Range(func(_, _ any) bool { n++; return true })
		return n
	}
	a, err := newMember(topic, gid, &seen)
	if err != nil {
		return err
	}
	if err := waitUntil(func() bool { return len(a.partitions()) == 4 }, "the first consumer to be assigned all 4 partitions"); err != nil {
		a.close()
		return err
	}
	b, err := newMember(topic, gid, &seen)
	if err != nil {
		a.close()
		return err
	}
	err = waitUntil(func() bool {
		pa, pb := a.partitions(), b.partitions()
		for p := range pa {
			if pb[p] {
				return false
			}
		}
		return len(pa) > 0 && len(pb) > 0 && len(pa)+len(pb) == 4
	}, "a rebalance sharing 4 partitions between 2 consumers")
	if err == nil {
		err = waitUntil(func() bool { return count() == len(recs) }, fmt.Sprintf("all %d records through the group", len(recs)))
	}
	a.close()
	b.close()
	if err != nil {
		for _, m := range []*member{a, b} {
			if m.err != nil {
				return fmt.Errorf("%v (consumer error: %v)", err, m.err)
			}
		}
		return err
	}
	cl, err := client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := ctxWait()
	defer cancel()
	offsets, err := kadm.NewClient(cl).FetchOffsets(ctx, gid)
	if err != nil {
		return err
	}
	got := map[int32]int64{}
	offsets.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			got[o.Partition] = o.At
		}
	})
	if !reflect.DeepEqual(got, map[int32]int64{0: 100, 1: 100, 2: 100, 3: 100}) {
		return fail("committed offsets %v, want 100 each", got)
	}
	return nil
}

func admin() error {
	topic := prefix + "-t"
	cl, err := client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := ctxWait()
	defer cancel()
	retention := "3600000"
	created, err := adm.CreateTopics(ctx, 3, 1, map[string]*string{"retention.ms": &retention}, topic)
	if err == nil {
		err = created.Error()
	}
	if err != nil {
		return err
	}
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return err
	}
	if d, ok := details[topic]; !ok || d.Err != nil || len(d.Partitions) != 3 {
		return fail("described %+v, want 3 partitions", details[topic])
	}
	configs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return err
	}
	rc, err := configs.On(topic, nil)
	if err != nil {
		return err
	}
	found := ""
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" {
			found = c.MaybeValue()
		}
	}
	if found != retention {
		return fail("retention.ms described as %q", found)
	}
	up, err := adm.UpdatePartitions(ctx, 5, topic)
	if err == nil {
		err = up.Error()
	}
	if err != nil {
		return err
	}
	if err := waitUntil(func() bool {
		d, err := adm.ListTopics(ctx, topic)
		return err == nil && len(d[topic].Partitions) == 5
	}, "5 partitions after CreatePartitions"); err != nil {
		return err
	}
	del, err := adm.DeleteTopics(ctx, topic)
	if err == nil {
		err = del.Error()
	}
	if err != nil {
		return err
	}
	return waitUntil(func() bool {
		d, err := adm.ListTopics(ctx)
		_, still := d[topic]
		return err == nil && !still
	}, "the deleted topic to disappear")
}

func alterConfigs() error {
	topic := prefix + "-t"
	if err := createTopic(topic, 1, nil); err != nil {
		return err
	}
	cl, err := client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := ctxWait()
	defer cancel()
	value := "12345"
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: &value}}, topic)
	if err != nil {
		return err
	}
	for _, r := range resp {
		if r.Err != nil {
			return fmt.Errorf("IncrementalAlterConfigs: %w (%s)", r.Err, r.ErrMessage)
		}
	}
	configs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return err
	}
	rc, err := configs.On(topic, nil)
	if err != nil {
		return err
	}
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" && c.MaybeValue() == value {
			return nil
		}
	}
	return fail("retention.ms is not %s after the change", value)
}

func transactions() error {
	topic := prefix + "-t"
	if err := createTopic(topic, 1, nil); err != nil {
		return err
	}
	cl, err := client(kgo.TransactionalID(prefix + "-tx"))
	if err != nil {
		return err
	}
	ctx, cancel := ctxWait()
	defer cancel()
	txn := func(values []string, commit kgo.TransactionEndTry) error {
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
		for _, v := range values {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(v)}).FirstErr(); err != nil {
				return err
			}
		}
		return cl.EndTransaction(ctx, commit)
	}
	var committed, aborted []string
	for i := 0; i < 10; i++ {
		committed = append(committed, fmt.Sprintf("committed-%d", i))
	}
	for i := 0; i < 5; i++ {
		aborted = append(aborted, fmt.Sprintf("aborted-%d", i))
	}
	err = txn(committed, kgo.TryCommit)
	if err == nil {
		err = txn(aborted, kgo.TryAbort)
	}
	if err == nil {
		err = txn([]string{"committed-last"}, kgo.TryCommit)
	}
	cl.Close()
	if err != nil {
		return err
	}
	got, err := readAssigned(topic, 1, 11, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	var values []string
	for _, r := range got {
		values = append(values, r.Value)
	}
	want := append(committed, "committed-last")
	if !reflect.DeepEqual(values, want) {
		return fail("read_committed consumer read %v", values)
	}
	return nil
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: franz-go-compat BOOTSTRAP SCENARIO PREFIX")
		os.Exit(2)
	}
	bootstrap, prefix = os.Args[1], os.Args[3]
	scenarios := map[string]func() error{
		"idempotent": idempotent, "group": group, "admin": admin,
		"alter-configs": alterConfigs, "transactions": transactions,
	}
	for codec := range codecs {
		c := codec
		scenarios["produce-"+c] = func() error { return produceConsume(c) }
	}
	fn, ok := scenarios[os.Args[2]]
	if !ok { // a name this program does not know fails; n/a is only what a scenario declares
		fmt.Println("RESULT fail unknown scenario " + os.Args[2])
		os.Exit(1)
	}
	err := fn()
	var na notApplicable
	switch {
	case err == nil:
		fmt.Println("RESULT pass")
	case errors.As(err, &na):
		fmt.Println("RESULT n/a " + na.why)
	default:
		fmt.Println("RESULT fail " + strings.Join(strings.Fields(err.Error()), " "))
		os.Exit(1)
	}
}
