// Package tlsrptcheck holds an independent check of SMTP TLS reports for
// tests: RFC 8460 §4.4's report written as a JSON Schema from the RFC, not
// from the types that write reports, and checked with jsonschema-go.
package tlsrptcheck

import (
	"encoding/json"

	"github.com/google/jsonschema-go/jsonschema"
)

// ReportSchema is RFC 8460 §4.4's report written as a JSON Schema, field by
// field from the RFC (not from daemon/outbound/tlsrpt's types): the required fields,
// their types, the policy and result types the RFC registers, UTC
// RFC 3339 times.
const ReportSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["organization-name", "date-range", "contact-info", "report-id", "policies"],
  "properties": {
    "organization-name": {"type": "string", "minLength": 1},
    "contact-info": {"type": "string", "minLength": 1},
    "report-id": {"type": "string", "minLength": 1},
    "date-range": {
      "type": "object",
      "required": ["start-datetime", "end-datetime"],
      "properties": {
        "start-datetime": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d+)?Z$"},
        "end-datetime": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d+)?Z$"}
      }
    },
    "policies": {
      "type": "array",
      "minItems": 1,
      "items": {
        "type": "object",
        "required": ["policy", "summary"],
        "properties": {
          "policy": {
            "type": "object",
            "required": ["policy-type", "policy-domain"],
            "properties": {
              "policy-type": {"enum": ["tlsa", "sts", "no-policy-found"]},
              "policy-string": {"type": "array", "items": {"type": "string"}},
              "policy-domain": {"type": "string", "minLength": 1},
              "mx-host": {"type": "array", "items": {"type": "string"}}
            }
          },
          "summary": {
            "type": "object",
            "required": ["total-successful-session-count", "total-failure-session-count"],
            "properties": {
              "total-successful-session-count": {"type": "integer", "minimum": 0},
              "total-failure-session-count": {"type": "integer", "minimum": 0}
            }
          },
          "failure-details": {
            "type": "array",
            "items": {
              "type": "object",
              "required": ["result-type", "failed-session-count"],
              "properties": {
                "result-type": {"enum": ["starttls-not-supported", "certificate-host-mismatch", "certificate-expired",
                  "tlsa-invalid", "dnssec-invalid", "dane-required", "certificate-not-trusted", "sts-policy-invalid",
                  "sts-webpki-invalid", "validation-failure", "sts-policy-fetch-error"]},
                "sending-mta-ip": {"type": "string"},
                "receiving-mx-hostname": {"type": "string"},
                "receiving-mx-helo": {"type": "string"},
                "receiving-ip": {"type": "string"},
                "failed-session-count": {"type": "integer", "minimum": 1},
                "additional-information": {"type": "string"},
                "failure-reason-code": {"type": "string"}
              }
            }
          }
        }
      }
    }
  }
}`

// Validate validates a report's JSON against ReportSchema.
func Validate(js []byte) (map[string]any, error) {
	var s jsonschema.Schema
	if err := json.Unmarshal([]byte(ReportSchema), &s); err != nil {
		return nil, err
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, err
	}
	var inst map[string]any
	if err := json.Unmarshal(js, &inst); err != nil {
		return nil, err
	}
	return inst, rs.Validate(inst)
}
