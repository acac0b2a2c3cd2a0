from django.urls import path

from jobs import views

app_name = "jobs"

urlpatterns = [
    path("", views.job_list, name="list"),
    path("new/", views.job_new, name="new"),
    path("new/preview/", views.job_preview, name="preview"),
    path("new/save-template/", views.template_save, name="save_template"),
    path("<int:job_id>/", views.job_detail, name="detail"),
    path("<int:job_id>/status/", views.job_status_partial, name="status"),
    path("<int:job_id>/output/", views.job_output_partial, name="output"),
    path("<int:job_id>/<slug:action>/", views.job_action, name="action"),
]
