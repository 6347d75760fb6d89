package daemon

import (
	"bytes"
	"crypto/rand"
)

// attachmentMessage is a multipart message of about size bytes: a line of
// text and an attachment of random bytes in base64, most of the message.
func attachmentMessage(size int) (msg, att []byte) {
	att = make([]byte, (size-4096)*3/4*76/78)
	rand.Read(att)
	var b bytes.Buffer
	b.WriteString("From: a@sender.example\r\nTo: big@example.test\r\nSubject: big, with an attachment\r\nMIME-Version: 1.0\r\n")
	b.WriteString("Message-ID: <big-attachment@sender.example>\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n")
	b.WriteString("--b\r\nContent-Type: text/plain\r\n\r\nThe attachment is most of this message.\r\n")
	b.WriteString("--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=big.bin\r\nContent-Transfer-Encoding: base64\r\n\r\n")
	writeBase64(&b, att)
	b.WriteString("--b--\r\n")
	return b.Bytes(), att
}
