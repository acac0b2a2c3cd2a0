from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from portal import views

admin.site.site_header = "Slurm GPU Portal — allocation managers"
admin.site.site_title = "Slurm GPU Portal admin"

urlpatterns = [
    path("", views.home, name="home"),
    path("jobs/", include("jobs.urls")),
    path("projects/<slug:slug>/", views.project_detail, name="project"),
    path("healthz", views.healthz, name="healthz"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),
]
