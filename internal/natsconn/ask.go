package natsconn

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// A process asks others — a service for its info or its statistics, a
// coordinator for a checkpoint — with a reply subject under its answer
// prefix (AnswerPrefix), not its inbox. Those that answer it may publish
// there and nowhere else of its: its inbox, where the server delivers its
// JetStream pulls and API replies, stays its own. (Were answers to go to
// the inbox, any process allowed to answer it could deliver forged
// messages into a pull of its. Its inboxes begin with a random token of
// the connection's own (Auth.Options), and an answer subject's last token
// is random: nothing seen of one tells another.)

// AnswerPrefix is where answers to the asking of a process with inbox
// prefix inbox (nats.CustomInboxPrefix — its first token; "" for
// nats.go's _INBOX) come: _ANSWER in place of its _INBOX.
func AnswerPrefix(inbox string) string {
	if inbox == "" {
		inbox = nats.InboxPrefix[:len(nats.InboxPrefix)-1]
	}
	first, _, _ := strings.Cut(inbox, ".")
	return "_ANSWER" + strings.TrimPrefix(first, "_INBOX")
}

// AnswerInbox returns a new subject under nc's answer prefix, its last
// token random: those who answer see it, and learn nothing of the
// connection's inboxes or its other asks from it.
func AnswerInbox(nc *nats.Conn) string {
	return AnswerPrefix(nc.Opts.InboxPrefix) + "." + randomToken()
}

// randomToken is 128 random bits, as a subject token.
func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}

// Ask sends a request on subject and returns the first answer, or
// nats.ErrNoResponders when none listens, or ctx's error.
func Ask(ctx context.Context, nc *nats.Conn, subject string, data []byte) (*nats.Msg, error) {
	inbox := AnswerInbox(nc)
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }() // the answer, if any, is read
	if err := sub.AutoUnsubscribe(1); err != nil {
		return nil, err
	}
	if err := nc.PublishRequest(subject, inbox, data); err != nil {
		return nil, err
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, err
	}
	if NoResponders(m) {
		return nil, fmt.Errorf("%s: %w", subject, nats.ErrNoResponders)
	}
	return m, nil
}

// NoResponders reports whether m is the server's word that nobody
// listened to a request.
func NoResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}
