//go:build tools

// Package tools pins velero-plugin-for-aws (Velero's S3 object store plugin). It is its own
// module, not part of ../velero: together, MVS would raise Velero's aws-sdk-go-v2/service/ec2
// from v1.143 to the plugin's v1.305 and the plugin's Velero from v1.18.1 to v1.18.3, so neither
// binary would be built from the dependencies its release was tested with.
package tools

import _ "github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws"
