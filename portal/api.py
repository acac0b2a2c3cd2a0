"""The addresses of the REST API: /api/v1/ and its schema and docs.

Each app's api.py holds its views; this module only gives them addresses,
so the apps below never import upwards.
"""

from django.urls import include, path, re_path
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from accounts import api as accounts
from accounts import api_caps as caps
from accounts import api_sign_in as sign_in
from accounts import api_webhooks as hooks
from clusters import api as clusters
from jobs import api as jobs
from portal.api_errors import api_not_found
from portal.status import Status


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "sgp_…",
            "description": "A personal access token (POST /api/v1/tokens/ from a browser "
            "session); it is shown once.",
        }


v1 = [
    path("me/", accounts.Me.as_view(), name="me"),
    path("projects/", accounts.ProjectList.as_view(), name="projects"),
    path("projects/<slug:slug>/", accounts.ProjectDetail.as_view(), name="project"),
    path("projects/<slug:slug>/usage/", accounts.ProjectUsage.as_view(), name="project-usage"),
    path("projects/<slug:slug>/caps/", caps.ProjectCaps.as_view(), name="project-caps"),
    path(
        "projects/<slug:slug>/caps/<str:username>/",
        caps.MemberCapDetail.as_view(),
        name="project-member-cap",
    ),
    path("partitions/", clusters.PartitionList.as_view(), name="partitions"),
    path("status/", Status.as_view(), name="status"),
    path("jobs/", jobs.JobList.as_view(), name="jobs"),
    path("jobs/estimate/", jobs.JobEstimate.as_view(), name="job-estimate"),
    path("jobs/<int:pk>/", jobs.JobDetail.as_view(), name="job"),
    path("jobs/<int:pk>/cancel/", jobs.JobCancel.as_view(), name="job-cancel"),
    path("jobs/<int:pk>/hold/", jobs.JobHold.as_view(), name="job-hold"),
    path("jobs/<int:pk>/release/", jobs.JobRelease.as_view(), name="job-release"),
    path("jobs/<int:pk>/output/", jobs.JobOutput.as_view(), name="job-output"),
    path("templates/", jobs.TemplateList.as_view(), name="templates"),
    path(
        "allocation-requests/",
        accounts.AllocationRequestList.as_view(),
        name="allocation-requests",
    ),
    path(
        "allocation-requests/<int:pk>/approve/",
        accounts.AllocationRequestApprove.as_view(),
        name="allocation-request-approve",
    ),
    path(
        "allocation-requests/<int:pk>/deny/",
        accounts.AllocationRequestDeny.as_view(),
        name="allocation-request-deny",
    ),
    path("tokens/", accounts.TokenList.as_view(), name="tokens"),
    path("tokens/<int:pk>/", accounts.TokenDetail.as_view(), name="token"),
    path("hooks/", hooks.WebhookList.as_view(), name="webhooks"),
    path("hooks/<int:pk>/", hooks.WebhookDetail.as_view(), name="webhook"),
    path("hooks/<int:pk>/test/", hooks.WebhookTest.as_view(), name="webhook-test"),
    path("sign-in/", sign_in.SignIn.as_view(), name="sign-in"),
    path("tokens/sign-in/", sign_in.TokenFromSignIn.as_view(), name="token-sign-in"),
]

urlpatterns = [
    path("v1/", include(v1)),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI only: drf-spectacular's Redoc page loads Google's fonts, and the portal
    # must work offline. The split view serves Swagger UI's start-up script as a file
    # of its own (?script), so the page needs no inline script (portal/security.py).
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema"), name="docs"),
    # Last: an address under /api/ that names no endpoint is a 404 in the error shape.
    re_path(r"^(?P<path>.*)$", api_not_found),
]
