from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from accounts import views as account_views
from accounts import webhook_views
from accounts.login import AdminLoginForm, login_view, with_throttle_status
from accounts.oidc import SignInCallback, SignInStart
from portal import metrics, status, views

admin.site.site_header = "Slurm GPU Portal — allocation managers"
admin.site.site_title = "Slurm GPU Portal admin"
# The admin's log-in counts and refuses failures as /login/ does (accounts/login_throttle.py).
admin.site.login_form = AdminLoginForm

urlpatterns = [
    path("", views.home, name="home"),
    path("jobs/", include("jobs.urls")),
    path("projects/<slug:slug>/", views.project_detail, name="project"),
    path("projects/<slug:slug>/caps/", account_views.project_caps, name="project_caps"),
    path("status/", status.status_page, name="status"),
    path("tokens/", account_views.tokens, name="tokens"),
    path("preferences/", account_views.preferences, name="preferences"),
    path("tokens/<int:token_id>/revoke/", account_views.token_revoke_view, name="token_revoke"),
    path("hooks/", webhook_views.webhooks_page, name="webhooks"),
    path("hooks/<int:hook_id>/delete/", webhook_views.webhook_delete_view, name="webhook_delete"),
    path("hooks/<int:hook_id>/test/", webhook_views.webhook_test_view, name="webhook_test"),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("login/", login_view, name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("oidc/start/", SignInStart.as_view(), name="oidc_start"),
    path("oidc/callback/", SignInCallback.as_view(), name="oidc_callback"),
    path("i18n/", include("django.conf.urls.i18n")),
    # Ahead of the admin's own address for its log-in page, to answer 429 when refused.
    path("admin/login/", with_throttle_status(admin.site.login), name="admin_login"),
    path("admin/", admin.site.urls),
    path("api/", include(("portal.api", "api"), namespace="api")),
]
