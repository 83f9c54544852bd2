// Command certmanager runs, out of cluster, the parts of cert-manager the restore-hooks chart
// uses by default, built from the cert-manager module's own packages (its cmd/* binaries are
// modules of their own that the Go module proxy does not serve). Two subcommands, each one
// process, as upstream runs them as two Deployments:
//
//	certmanager controller --kubeconfig=FILE   the Certificate and CertificateRequest controllers
//	                                           for SelfSigned and CA issuers, the Issuer and
//	                                           ClusterIssuer controllers, the internal approver
//	certmanager cainjector --kubeconfig=FILE   the CA injector, for MutatingWebhookConfigurations
//
// What upstream's cmd/controller/app (controller.go) and cmd/cainjector/app (controller.go) do,
// minus leader election, the metrics and health servers and every other issuer type (ACME,
// Vault, Venafi: their SDKs would double the build for nothing the chart needs). The controller
// and its options are upstream's defaults (internal/apis/config/controller/v1alpha1), repeated
// here because that package is internal to the module.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Each registers its controller with controller.Known() (upstream: cmd/controller/app/start.go
	// imports them the same way, plus the issuer types not needed here).
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	// The Issuer controllers' per-type setup (Ready condition of SelfSigned and CA issuers).
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "controller" && os.Args[1] != "cainjector") {
		fmt.Fprintln(os.Stderr, "usage: certmanager controller|cainjector --kubeconfig=FILE [-v=N]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server (required)")
	clusterResourceNamespace := fs.String("cluster-resource-namespace", "kube-system",
		"where ClusterIssuers' Secrets are (upstream's default)")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[2:])
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "certmanager: --kubeconfig is required")
		os.Exit(2)
	}
	logf.InitLogs()
	ctrl.SetLogger(logf.Log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log.WithName(os.Args[1]))

	var err error
	if os.Args[1] == "controller" {
		err = runController(ctx, *kubeconfig, *clusterResourceNamespace)
	} else {
		err = runCAInjector(ctx, *kubeconfig)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "certmanager %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// runController is upstream's cmd/controller/app.Run without leader election and servers.
func runController(rootCtx context.Context, kubeconfig, clusterResourceNamespace string) error {
	log := logf.FromContext(rootCtx)
	factory, err := controller.NewContextFactory(rootCtx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions: controller.IssuerOptions{
			ClusterResourceNamespace: clusterResourceNamespace,
		},
		CertificateOptions: controller.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}
	errs := make(chan error, len(controller.Known()))
	for name, constructor := range controller.Known() {
		c, err := constructor(factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		log.Info("starting controller", "controller", name)
		go func() { errs <- c.Run(5, rootCtx) }()
	}
	base.SharedInformerFactory.Start(rootCtx.Done())
	base.KubeSharedInformerFactory.Start(rootCtx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(rootCtx.Done())
	select {
	case <-rootCtx.Done():
		return nil
	case err := <-errs:
		if rootCtx.Err() != nil {
			return nil
		}
		return fmt.Errorf("a controller stopped: %v", err)
	}
}

// runCAInjector is upstream's cmd/cainjector/app.Run for MutatingWebhookConfigurations only,
// with the Certificate data source (cert-manager.io/inject-ca-from) and the Secret one.
func runCAInjector(ctx context.Context, kubeconfig string) error {
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	restConfig.UserAgent = "cert-manager-cainjector"
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		Cache:  cache.Options{ReaderFailOnMissingInformer: true},
		// As upstream: Secrets are read directly, never cached.
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		return fmt.Errorf("error creating manager: %w", err)
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: false,
			cainjector.APIServiceName:                     false,
			cainjector.CustomResourceDefinitionName:       false,
		},
	})
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
